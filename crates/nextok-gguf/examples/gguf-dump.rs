//! Prints a GGUF file's metadata (long arrays abbreviated) and tensor list.
//!
//! `cargo run -p nextok-gguf --example gguf-dump -- MODEL.gguf`

use nextok_gguf::{Array, GgufFile, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: gguf-dump FILE.gguf")?;
    let file = GgufFile::open(path)?;
    println!("GGUF v{}, {} bytes", file.version(), file.bytes().len());
    for (key, value) in file.metadata().iter() {
        match value {
            Value::Array(Array::String(v)) if v.len() > 8 => {
                println!("{key} = [{} strings: {:?} ...]", v.len(), &v[..8])
            }
            Value::Array(a) if a.len() > 8 => {
                println!("{key} = [{} x {:?}]", a.len(), a.element_type())
            }
            Value::String(s) if s.len() > 200 => println!("{key} = {:?}...", &s[..200]),
            other => println!("{key} = {other:?}"),
        }
    }
    for t in file.tensors() {
        println!("{} {:?} {:?} @{}", t.name, t.ggml_type, t.dims, t.offset);
    }
    Ok(())
}
