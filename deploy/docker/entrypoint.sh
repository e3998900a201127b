#!/bin/sh
# corral-entrypoint: runs a Corral command in its container.
# - Started as uid 10001 (the image's default; Kubernetes): runs the command as it is.
# - Started as root with CORRAL_DROP_PRIVILEGES=1 (docker-compose, where a secret is a bind-mounted file owned by
#   whoever created it, mode 600): copies CORRAL_SECRET_SOURCE to /run/corral/secret owned by the corral user,
#   gives it /var/lib/corral (the state volume), then drops to it with no capabilities left — as the official
#   PostgreSQL and Redis images do.
# - Started as root with CORRAL_WRITABLE_CGROUPS=1 (the sandbox host, which stays root: it switches to each
#   sandbox's uid): the runtime mounts the container's own cgroup read-only, and the host makes a cgroup per
#   sandbox below it, so that view is remounted writable — in this container's mount namespace only, where only
#   the container's own subtree is visible (needs CAP_SYS_ADMIN, which the sandbox host has anyway).
set -eu
if [ "$(id -u)" = 0 ] && [ "${CORRAL_WRITABLE_CGROUPS:-0}" = 1 ]; then
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") fs = $(i + 1);
         if (fs ~ /^cgroup2?$/ && $6 ~ /(^|,)ro(,|$)/) print $5 }' /proc/self/mountinfo |
    while read -r mountpoint; do
      mount -o remount,bind,rw "$mountpoint" 2> /dev/null ||
        echo "corral-entrypoint: cannot make $mountpoint writable; sandboxes get rlimits instead of a cgroup" >&2
    done
fi
if [ "$(id -u)" = 0 ] && [ "${CORRAL_DROP_PRIVILEGES:-0}" = 1 ]; then
  if [ -n "${CORRAL_SECRET_SOURCE:-}" ]; then
    install -m 0600 -o corral -g corral "$CORRAL_SECRET_SOURCE" /run/corral/secret
  fi
  chown corral:corral /var/lib/corral
  exec setpriv --reuid=corral --regid=corral --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"
fi
exec "$@"
