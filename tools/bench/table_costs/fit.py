"""A cost's growth with the table: a straight line through its figures.

A cost is called flat when the line's slope accounts for little of it at
the largest table measured: what it grows by over the range is within the
noise of a shared machine. Otherwise it is linear in the table, and the
slope is its price per row, which the billion-id plan multiplies out.
"""
FLAT_SHARE = 0.25
"""At most this much of the cost at the largest table from the slope:
flat."""


def line(xs, ys):
  """(intercept, slope) of the least-squares line through (xs, ys); a
  single point is flat through it."""
  points = [(x, y) for x, y in zip(xs, ys) if y is not None]
  if not points:
    return None
  if len({x for x, _ in points}) < 2:
    return (sum(y for _, y in points) / len(points), 0.0)
  mean_x = sum(x for x, _ in points) / len(points)
  mean_y = sum(y for _, y in points) / len(points)
  sxx = sum((x - mean_x) ** 2 for x, _ in points)
  sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
  slope = sxy / sxx
  return (mean_y - slope * mean_x, slope)


def growth(xs, ys):
  """{"intercept", "slope", "share", "verdict", "points"} of one cost
  against the rows in `xs`, or None without a figure. `share` is the
  slope's part of the line at the largest x."""
  fitted = line(xs, ys)
  if fitted is None:
    return None
  intercept, slope = fitted
  largest = max(x for x, y in zip(xs, ys) if y is not None)
  at_largest = intercept + slope * largest
  share = (slope * largest / at_largest) if at_largest > 0 else 0.0
  flat = slope <= 0 or share < FLAT_SHARE
  return {"intercept": intercept, "slope": 0.0 if slope < 0 else slope,
          "share": max(share, 0.0), "verdict": "flat" if flat else "linear",
          "points": sum(y is not None for y in ys)}
