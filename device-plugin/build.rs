//! Compiles the vendored kubelet protos with protox (a pure-Rust protobuf compiler), so building
//! needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/deviceplugin.proto", "proto/podresources.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
