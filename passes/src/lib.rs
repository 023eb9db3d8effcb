pub mod decompose;
pub mod fuse;
pub mod lower;
pub mod memory;
pub mod optimize;
pub mod pipeline;
pub mod schedule;
