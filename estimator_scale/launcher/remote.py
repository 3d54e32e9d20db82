"""Tasks on other hosts: ssh command lines, what travels (variables on
stdin, which `ps` does not show), who answers."""
import shlex
import subprocess
import threading

from estimator_scale import environment

FORWARDED_PREFIXES = ("TF_", "HOROVOD_", environment.PREFIX)
FORWARDED_NAMES = ("PYTHONPATH", "PATH")
"""What a remote task gets of the launcher's environment, besides `-x NAME`:
a whole environment may hold secrets (cloud keys, tokens) a job never reads."""

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
"""No password prompt (it would hang the job); a host that stops answering
ends its task within about 15 s, so the launcher can stop the others."""

HEARTBEAT_SECS = 5
"""How often the launcher writes a line to each remote task's stdin."""

SILENCE_SECS = 20
"""A remote task that reads no line for this long stops, as one whose
launcher is gone: four heartbeats missed, so a busy launcher is not taken
for a lost one, and short enough that a cut-off host's tasks are gone
before the launcher's restart (ssh's own 15 s, then the others stopped)
could take that host back."""

SSH_LOST = 255
"""ssh's exit code when the connection failed or was lost."""


def forwarded_environment(environ, extra=()):
  """The variables a remote task gets: `FORWARDED_*` and `extra` names."""
  env = {k: v for k, v in environ.items()
         if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED_NAMES}
  for item in extra:
    name, eq, value = item.partition("=")
    if eq:
      env[name] = value
    elif name in environ:
      env[name] = environ[name]
    else:
      raise ValueError(f"-x {name}: not set in the launcher's environment; "
                       f"set it, or pass -x {name}=VALUE")
  return env


# Runs on the remote host under bash: reads the exports from stdin (exactly
# their length, so stdin stays open), starts the task in its own process
# group, and stops that group when stdin closes (the launcher stopped) or
# stays silent past the heartbeat's limit (the launcher or the link was
# lost), as a task must never outlive its job. It gives the group 5 s to
# stop on TERM and is gone as soon as the group is. A task killed while its
# memory cgroup (v1) counted an out-of-memory kill gets a line that says so,
# with the host and the group's limit and peak: its exit code (137) alone
# says only SIGKILL.
_REMOTE = """set -m
eval "$(head -c {length})"
cd {cwd} || exit 126  # no such directory on this host
group=/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" {{print $3}}' \
  /proc/self/cgroup 2>/dev/null)
kills() {{ awk '$1 == "oom_kill" {{print $2}}' "$group/memory.oom_control" \
  2>/dev/null; }}
before=$(kills)
"$@" </dev/null &
task=$!
{{ while read -r -t {silence} _; do :; done; kill -TERM -- -$task;
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- -$task || exit; sleep 0.5; done
  kill -KILL -- -$task; }} \
  >/dev/null 2>&1 &
watch=$!
set +m  # the groups are made; no job-status lines in the task's output
wait $task
code=$?
kill -- -$watch 2>/dev/null
if [ $code = 137 ] && [ -n "$before" ] && [ "$(kills)" -gt "$before" ]; then
  echo "{oom_marker} $(hostname): killed by the out-of-memory killer at its" \
    "memory cgroup's limit of $(( $(cat $group/memory.limit_in_bytes) >> 20 ))" \
    "MiB (peak $(( $(cat $group/memory.max_usage_in_bytes) >> 20 )) MiB)" >&2
fi
exit $code
"""

OOM_MARKER = "estimator-scale-launch: out of memory on"
"""How a remote task's OOM-kill line begins (`_REMOTE`)."""


def _port_options(ssh_port):
  return ["-p", str(ssh_port)] if ssh_port else []


def remote_command(host, command, env, cwd, ssh_port=None):
  """(ssh argv, stdin payload) that run `command` on `host` with `env`."""
  exports = "".join(f"export {k}={shlex.quote(v)}\n"
                    for k, v in sorted(env.items())).encode()
  script = _REMOTE.format(length=len(exports), cwd=shlex.quote(cwd),
                          silence=SILENCE_SECS, oom_marker=OOM_MARKER)
  remote = " ".join(["bash", "-c", shlex.quote(script), "launch"] +
                    [shlex.quote(c) for c in command])
  return ["ssh", *SSH_OPTIONS, *_port_options(ssh_port), host,
          remote], exports


def ports_free_command(ports):
  """A shell command failing while its host listens on one of `ports` (a
  cut-off task holds its port until its ssh notices)."""
  if not ports:
    return "true"
  probe = ("for p in " + " ".join(str(int(p)) for p in ports) +
           "; do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && exit 1; "
           "done; exit 0")
  return "bash -c " + shlex.quote(probe)


def answers(host, ssh_port=None, timeout=25, free_ports=()):
  """Whether `host` runs a command over ssh now, `free_ports` unused."""
  try:
    return subprocess.run(
        ["ssh", *SSH_OPTIONS, *_port_options(ssh_port), host,
         ports_free_command(free_ports)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
  except subprocess.TimeoutExpired:
    return False


def answering(hosts, ssh_port=None, free_ports=None):
  """Hosts that answer, probed at once (`free_ports`: {host: unused ports})."""
  result = {}

  def probe(host):
    result[host] = answers(host, ssh_port,
                           free_ports=(free_ports or {}).get(host, ()))
  threads = [threading.Thread(target=probe, args=(h,), daemon=True)
             for h in hosts]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  return {h for h in hosts if result.get(h)}
