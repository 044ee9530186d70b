// librbd and librados from Debian's librbd-dev and librados-dev (test/ci/host-deps.sh).
fn main() {
    println!("cargo:rustc-link-lib=dylib=rbd");
    println!("cargo:rustc-link-lib=dylib=rados");
}
