pub mod domain;
pub mod tools;
