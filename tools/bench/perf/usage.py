"""What a measured process used: its peak memory and its CPU time.

Apart from the timing hook so that the startup wrapper, which must not
import TensorFlow, reads its child's usage with the same functions.
"""
import resource


def peak_rss_mib(who=resource.RUSAGE_SELF):
  """This process's (or its children's) peak resident set size, in MiB.

  Linux reports KiB. For RUSAGE_CHILDREN it is the largest over every child
  waited for, not a sum.
  """
  return resource.getrusage(who).ru_maxrss / 1024.0


def restart_peak_rss():
  """Starts a new peak-RSS window for this process.

  Linux resets a process's high-water mark (VmHWM, and ru_maxrss with it)
  when "5" is written to /proc/self/clear_refs, so the peak read at the end
  of the timed window is the window's own: what training holds, without
  the variables' initialisation or the final checkpoint's save, which can
  exceed it.

  Returns:
    (the peak so far, whether the kernel restarted it).
  """
  peak = peak_rss_mib()
  try:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
      f.write("5")
  except OSError:
    return peak, False
  return peak, True


def cpu_seconds(who=resource.RUSAGE_SELF):
  """CPU time of all this process's threads, to show how many cores it used."""
  usage = resource.getrusage(who)
  return usage.ru_utime + usage.ru_stime
