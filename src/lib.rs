pub mod domain;
pub mod llm;
