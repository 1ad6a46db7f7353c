# Sourced by the .ci scripts: installing what a script needs when it is missing.

# apt_install PACKAGE...: installs the packages named (none: nothing to do).
apt_install() {
  [ $# -gt 0 ] || return 0
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$@"
}

# rustup_targets TARGET...: adds the rustup targets not installed yet.
rustup_targets() {
  local t
  for t in "$@"; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t"
  done
}
