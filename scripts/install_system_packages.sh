#!/usr/bin/env bash
# The Debian packages some tests need, installed when missing (as root, with apt-get):
#   chromium chromium-driver                      runs.html in a real headless browser
#   slurm-wlm munge slurmdbd mariadb-server       a single-node SLURM with accounting (cluster/slurm.sh)
# Where they cannot be installed (not root, no apt-get, no registry), this says so in one line and
# exits 0: those tests then skip, each naming what is missing (tests/realparts.py). In CI (CI=true)
# it exits 1 instead: a real part that cannot be installed fails the run, never hides as a skip.
set -uo pipefail
PACKAGES=(chromium chromium-driver slurm-wlm munge slurmdbd mariadb-server)
PROGRAMS=(chromium chromedriver sbatch slurmctld slurmd slurmdbd munged mariadbd)

missing=()
for p in "${PROGRAMS[@]}"; do
  command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

give_up() {  # one line; in CI the run fails here
  case "${CI:-}" in
    1|true|TRUE|True|yes)
      echo "system packages: CI=true and ${missing[*]} cannot be installed ($1): the browser/SLURM tests cannot run" >&2
      exit 1 ;;
  esac
  echo "system packages: missing ${missing[*]} ($1), so the browser/SLURM tests will skip"
  exit 0
}

still_missing() {
  missing=()
  for p in "${PROGRAMS[@]}"; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing+=("$p")
  done
  [ ${#missing[@]} -ne 0 ]
}

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  give_up "not root with apt-get"
fi
echo "system packages: installing ${PACKAGES[*]} (missing: ${missing[*]})"
log=$(mktemp)
if ! (export DEBIAN_FRONTEND=noninteractive
      apt-get update -q && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}") >"$log" 2>&1; then
  reason="apt-get failed: $(grep -E '^(E|W):' "$log" | head -1 | cut -c1-160)"
  rm -f "$log"
  give_up "$reason"
fi
rm -f "$log"
still_missing && give_up "still missing after apt-get install"
exit 0
