//! The ONNX protobuf messages (`proto/onnx.proto` of onnx 1.22.0), as prost code.
//!
//! `onnx.pb.rs` is generated, not written: `scripts/generate-proto.sh` compiles the
//! `.proto` with protox and prost-build in a throwaway crate outside the repository,
//! so that building Ferrite needs neither `protoc` nor a build script.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!("onnx.pb.rs");
