#!/usr/bin/env bash
# The Debian packages some tests need, installed when missing (as root, with apt-get):
#   chromium chromium-driver                      runs.html in a real headless browser
#   slurm-wlm munge slurmdbd mariadb-server       a single-node SLURM with accounting (cluster/slurm.sh)
# Where they cannot be installed (not root, no apt-get, no registry), this says so and exits 0:
# those tests then skip, each with its reason.
set -uo pipefail
PACKAGES=(chromium chromium-driver slurm-wlm munge slurmdbd mariadb-server)
PROGRAMS=(chromium chromedriver sbatch slurmctld slurmd slurmdbd munged mariadbd)

missing=()
for p in "${PROGRAMS[@]}"; do
  command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system packages: missing ${missing[*]}; not root with apt-get, so the browser/SLURM tests will skip"
  exit 0
fi
echo "system packages: installing ${PACKAGES[*]} (missing: ${missing[*]})"
log=$(mktemp)
if ! (export DEBIAN_FRONTEND=noninteractive
      apt-get update -q && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}") >"$log" 2>&1; then
  echo "system packages: apt-get failed; the browser/SLURM tests will skip. Last lines:"
  tail -20 "$log"
fi
rm -f "$log"
exit 0
