//! `ferrite-onnx`: ONNX models to Ferrite graphs.
//!
//! [`import`] decodes a `ModelProto` (protobuf bytes, through `prost`, with its
//! recursion limit bounding nesting) and turns it into a [`ferrite_ir::Graph`]:
//! graph inputs that are not initializers become parameters, shape computations and
//! every node whose operands are all constants fold at import with the reference
//! interpreter, and each ONNX op maps onto IR ops exactly or is refused with an
//! error naming the op, the node and the opset. The crate does no I/O: external
//! data is read through an [`ExternalData`] resolver that the caller provides.
#![warn(missing_docs)]

mod error;
mod import;
mod ops;
pub mod proto;
mod symbolic;
pub mod tensor;

pub use error::{Error, NodeRef, Result};
pub use import::{
    Binding, Model, Options, FOLD_BUDGET, FOLD_LIMIT, MAX_NODES, MAX_NODE_ARITY, MAX_OPSET,
    MAX_VALUES, MIN_OPSET,
};
pub use symbolic::import_symbolic;
pub use tensor::{check_location, decode_tensor, ExternalData, NoExternalData};

/// The `prost` crate, to encode and decode the [`proto`] messages.
pub use prost;

use prost::Message;

/// Decodes a serialized `ModelProto` without importing it.
pub fn decode_model(bytes: &[u8]) -> Result<proto::ModelProto> {
    proto::ModelProto::decode(bytes).map_err(|e| Error::Decode(e.to_string()))
}

/// [`decode_model`] from an owned buffer: each tensor's `raw_data` is then a slice of
/// `bytes`, not a copy of it.
pub fn decode_model_owned(bytes: impl Into<prost::bytes::Bytes>) -> Result<proto::ModelProto> {
    proto::ModelProto::decode(bytes.into()).map_err(|e| Error::Decode(e.to_string()))
}

/// Imports a serialized ONNX model.
pub fn import(bytes: &[u8], options: &Options, ext: &mut dyn ExternalData) -> Result<Model> {
    let model = decode_model(bytes)?;
    import::import_model(&model, options, ext)
}

/// [`import`] from an owned buffer, which the weights are not copied out of before they
/// become tensors ([`decode_model_owned`]).
pub fn import_owned(
    bytes: impl Into<prost::bytes::Bytes>,
    options: &Options,
    ext: &mut dyn ExternalData,
) -> Result<Model> {
    let model = decode_model_owned(bytes)?;
    import::import_model(&model, options, ext)
}

/// Imports a decoded model.
pub fn import_proto(
    model: &proto::ModelProto,
    options: &Options,
    ext: &mut dyn ExternalData,
) -> Result<Model> {
    import::import_model(model, options, ext)
}
