# shellcheck shell=bash
# Sourced by scripts/test and .ci/run (after `cd` to the repository root, with SUDO set).
# apt-get that waits (up to 10 minutes) for another apt or dpkg process instead of failing at
# once: dpkg's lock through apt's own DPkg::Lock::Timeout; the package lists' lock, which
# `apt-get update` takes without any timeout, by trying again while apt says a lock is held.
apt_get() {
    local deadline=$((SECONDS + 600)) out said=""
    while true; do
        if out=$($SUDO apt-get -o DPkg::Lock::Timeout=600 "$@" 2>&1); then
            [ -z "$out" ] || printf '%s\n' "$out"
            return 0
        fi
        if ! grep -q "Could not get lock" <<<"$out" || [ "$SECONDS" -ge "$deadline" ]; then
            printf '%s\n' "$out" >&2
            return 1
        fi
        [ -n "$said" ] || echo "apt-get: another apt process holds its lock; waiting for it" >&2
        said=1
        sleep 5
    done
}
