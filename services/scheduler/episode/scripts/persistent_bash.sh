# The persistent bash tool's driver (persistent_tools.cc): each NUL-terminated command on stdin runs by `eval`
# in this shell itself, so cwd, variables and background jobs persist, with stdin from /dev/null (stdin is the
# command channel); its exit status and the per-process marker follow its output.
__corral_mark=$__CORRAL_MARK; unset __CORRAL_MARK
trap 'printf "\n[interrupted]\n"' INT
while IFS= read -r -d '' __corral_cmd; do
  eval "$__corral_cmd" < /dev/null 2>&1
  printf '\n__CORRAL_STATUS %d\n%s\n' "$?" "$__corral_mark"
done
