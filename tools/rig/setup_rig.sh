#!/usr/bin/env bash
# What tools/rig/cluster.py (the hosts-on-one-machine rig of tests/multihost) needs
# from the machine: iproute2 (ip, tc), util-linux (unshare, nsenter) and
# openssh (sshd in each host, ssh between them), and Slurm with munge for the
# rig's Slurm cluster (tools/rig/slurm.py). Installs what is missing with
# apt-get; a no-op once they are there. Without root nothing can be installed
# and the rig cannot run anyway (its tests skip): say so and go on.
set -euo pipefail

need=()
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v srun >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" != 0 ]]; then
  echo "setup_rig: not root, so not installing ${need[*]} (the multi-host tests need root and skip)"
  exit 0
fi
echo "setup_rig: installing ${need[*]}"
apt-get update -qq
# The packages' own services (sshd, munge, slurmd, slurmctld) are not wanted:
# each rig host starts its own. A policy-rc.d that says no keeps apt from
# starting them on the real network.
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
[[ -x /usr/sbin/sshd ]] && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1
