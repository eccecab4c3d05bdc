//! Generates the prost types for the vendored ONNX schema in `proto/`.
//!
//! `protoc` is built from source by `protobuf-src`, so a fresh machine needs only make and a C++
//! compiler.

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=proto/onnx-ml.proto");
    println!("cargo:rerun-if-changed=proto/onnx-data.proto");
    std::env::set_var("PROTOC", protobuf_src::protoc());
    let mut config = prost_build::Config::new();
    // Tensor payloads are `bytes::Bytes`, so decoding from a memory-mapped buffer copies nothing.
    config.bytes([".onnx.TensorProto.raw_data"]);
    config.compile_protos(
        &["proto/onnx-ml.proto", "proto/onnx-data.proto"],
        &["proto/"],
    )
}
