//! Compiles the subset of etcd's API in `proto/etcd` (the bench's etcd rows) with protox, a
//! proto compiler in Rust, so the build needs nothing beyond cargo: no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/etcd/v3lock.proto", "proto/etcd/v3election.proto"];
    println!("cargo:rerun-if-changed=proto/etcd");
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
