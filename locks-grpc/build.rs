//! Compiles `proto/locks/v1/locks.proto` with protox (a proto compiler in Rust), so the build
//! needs nothing beyond cargo: no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/locks/v1/locks.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
