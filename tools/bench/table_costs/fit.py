"""A cost's growth with the table: a straight line through its figures.

A cost is called flat when the line's slope accounts for little of it at
the largest table measured: what it grows by over the range is within the
noise of a shared machine. Otherwise it is linear in the table, and the
slope is its price per row, which the billion-id plan multiplies out.
"""
import math

FLAT_SHARE = 0.25
"""At most this much of the cost at the largest table from the slope:
flat."""
FASTER = 1.3
"""A linear cost whose last doubling step grows as rows^this or more is
called faster than linear: the line's slope then understates the largest
tables' price."""


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
  power = last_power(xs, ys)
  verdict = ("flat" if flat else
             "faster" if power is not None and power >= FASTER else "linear")
  return {"intercept": intercept, "slope": 0.0 if slope < 0 else slope,
          "share": min(max(share, 0.0), 1.0), "verdict": verdict,
          "power": power, "points": sum(y is not None for y in ys)}


def last_power(xs, ys):
  """p where the cost grows as rows^p between the two largest tables, or
  None (fewer than two, or a cost that is not positive)."""
  points = sorted((x, y) for x, y in zip(xs, ys) if y is not None)
  if len(points) < 2:
    return None
  (x0, y0), (x1, y1) = points[-2:]
  if min(y0, y1) <= 0 or x1 == x0:
    return None
  return math.log(y1 / y0) / math.log(x1 / x0)
