pub mod accel;
pub mod cpu;
pub mod profile;
