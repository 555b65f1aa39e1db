//! The reader on hand-made files, on malformed files, and on the real default model.

use nextok_gguf::write::GgufWriter;
use nextok_gguf::{Array, Error, GgmlType, GgufFile, Value, ValueType};

fn tiny() -> Vec<u8> {
    GgufWriter::new()
        .metadata("general.architecture", Value::String("llama".into()))
        .metadata("llama.block_count", Value::U32(2))
        .metadata("llama.rope.freq_base", Value::F32(10000.0))
        .metadata(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(vec!["a".into(), "b".into()])),
        )
        .tensor_f32("w", &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        .tensor_f32("b", &[3], &[7.0, 8.0, 9.0])
        .to_bytes()
}

#[test]
fn round_trip_of_metadata_and_tensors() {
    let file = GgufFile::from_bytes(tiny()).unwrap();
    assert_eq!(file.version(), 3);
    let md = file.metadata();
    assert_eq!(md.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(md.get_u32("llama.block_count").unwrap(), 2);
    assert_eq!(md.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(md.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(
        md.get_str_array("tokenizer.ggml.tokens").unwrap(),
        ["a", "b"]
    );
    let b = file.tensor("b").unwrap();
    let floats: Vec<f32> = b
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(floats, [7.0, 8.0, 9.0]);
    assert_eq!(file.tensor("w").unwrap().info.elements(), 6);
    // Tensor data is aligned to the file's alignment.
    let base = file.bytes().as_ptr() as usize;
    assert_eq!((b.data.as_ptr() as usize - base) % 32, 0);
}

#[test]
fn typed_getters_say_what_is_wrong() {
    let file = GgufFile::from_bytes(tiny()).unwrap();
    let md = file.metadata();
    assert_eq!(
        md.get_u32("general.architecture"),
        Err(Error::WrongType {
            key: "general.architecture".into(),
            expected: "integer",
            found: ValueType::String
        })
    );
    assert_eq!(
        md.get_str("nope"),
        Err(Error::MissingKey { key: "nope".into() })
    );
    assert!(matches!(
        md.get_f32_array("tokenizer.ggml.tokens"),
        Err(Error::WrongType { .. })
    ));
    assert_eq!(
        file.tensor("missing").unwrap_err(),
        Error::MissingTensor {
            name: "missing".into()
        }
    );
}

#[test]
fn malformed_files_give_typed_errors() {
    assert!(matches!(
        GgufFile::from_bytes(b"GGML\x03\0\0\0".to_vec()),
        Err(Error::BadMagic { .. })
    ));
    assert!(matches!(
        GgufFile::from_bytes(b"GG".to_vec()),
        Err(Error::BadMagic { .. })
    ));
    let mut v1 = tiny();
    v1[4] = 1;
    assert_eq!(
        GgufFile::from_bytes(v1).unwrap_err(),
        Error::UnsupportedVersion { version: 1 }
    );
    // Every truncation of a valid file is an error, never a panic.
    let full = tiny();
    for len in 0..full.len() - 1 {
        let cut = full[..len].to_vec();
        assert!(
            GgufFile::from_bytes(cut).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
    // An absurd tensor count is refused before any allocation, as more than the file holds.
    let mut huge = tiny();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let len = huge.len() as u64;
    assert_eq!(
        GgufFile::from_bytes(huge).unwrap_err(),
        Error::EndsEarly {
            what: "tensor count",
            value: u64::MAX,
            offset: 8,
            needed: u64::MAX,
            file_len: len,
        }
    );
    // An unknown tensor type.
    let bad_type = GgufWriter::new()
        .tensor_raw("t", &[32], GgmlType::Q8_0, vec![0; 34])
        .to_bytes();
    let pos = bad_type
        .windows(4)
        .rposition(|w| w == 8u32.to_le_bytes())
        .unwrap();
    let mut patched = bad_type.clone();
    patched[pos..pos + 4].copy_from_slice(&99u32.to_le_bytes());
    assert_eq!(
        GgufFile::from_bytes(patched).unwrap_err(),
        Error::UnsupportedTensorType {
            tensor: "t".into(),
            code: 99
        }
    );
    // A shape that is not a whole number of blocks.
    let ragged = GgufWriter::new()
        .tensor_raw("q", &[31], GgmlType::Q8_0, vec![0; 34])
        .to_bytes();
    assert!(matches!(
        GgufFile::from_bytes(ragged),
        Err(Error::BadShape { .. })
    ));
}

/// The default model, as the conformance data describes it: GGUF v3, 98,362,432 bytes, the
/// Llama architecture with 30 blocks, a 49,152-token vocabulary, Q4_1 weights.
#[test]
fn reads_the_real_default_model() {
    let path = std::env::var("NEXTOK_MODEL").unwrap_or_else(|_| {
        format!(
            "{}/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let file = GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{e}: run `cargo xtask fetch-model` first"));
    assert_eq!(file.version(), 3);
    assert_eq!(file.bytes().len(), 98_362_432);
    let md = file.metadata();
    assert_eq!(md.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(md.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(
        md.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49_152
    );
    assert_eq!(md.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.info.ggml_type, GgmlType::Q4_1);
    assert_eq!(q.info.dims, vec![576, 576]);
    assert_eq!(q.data.len() as u64, 576 * 576 / 32 * 20);
}

/// Version 2 has the same layout as version 3 (64-bit counts and lengths; v3 only added
/// big-endian files, which carry the version byte-swapped and are refused as unsupported).
#[test]
fn version_2_files_are_read() {
    let mut v2 = tiny();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    let file = GgufFile::from_bytes(v2).unwrap();
    assert_eq!(file.version(), 2);
    assert_eq!(file.metadata().get_u32("llama.block_count").unwrap(), 2);
    assert_eq!(file.tensor("b").unwrap().data.len(), 12);
    let mut big_endian = tiny();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(
        GgufFile::from_bytes(big_endian),
        Err(Error::UnsupportedVersion { .. })
    ));
}

#[test]
fn a_truncated_file_says_where_it_ends_whatever_the_cut() {
    // Issue #13, point 7: a truncated file was reported as an "implausible" count. Cut anywhere
    // after the magic, the message now says where the file ends; no cut is taken for a whole file.
    let full = tiny();
    for len in 4..full.len() {
        let err = GgufFile::from_bytes(full[..len].to_vec()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&format!("the file ends at byte {len}")),
            "cut at {len}: {message}"
        );
        assert!(message.contains("truncated"), "cut at {len}: {message}");
    }
}

#[test]
fn a_count_past_the_end_and_a_tensor_past_the_end_are_named() {
    let full = tiny();
    // The metadata entry count is at byte 16. Five entries are in the file; a count of 1,000
    // needs at least 13 bytes each (key length, type, one byte of value).
    let mut more = full.clone();
    more[16..24].copy_from_slice(&1000u64.to_le_bytes());
    assert_eq!(
        GgufFile::from_bytes(more.clone()).unwrap_err(),
        Error::EndsEarly {
            what: "metadata entry count",
            value: 1000,
            offset: 16,
            needed: 13_000,
            file_len: full.len() as u64,
        }
    );
    // The last byte cut off: the last tensor (`b`, 3 f32 = 12 bytes) runs one byte past the end.
    let cut = full[..full.len() - 1].to_vec();
    let err = GgufFile::from_bytes(cut).unwrap_err();
    assert_eq!(
        err,
        Error::TensorPastEnd {
            tensor: "b".into(),
            start: full.len() as u64 - 12,
            end: full.len() as u64,
            file_len: full.len() as u64 - 1,
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the file ends at byte {}, but tensor `b` takes bytes {} to {}: it is truncated (an interrupted download?) or corrupt",
            full.len() - 1,
            full.len() - 12,
            full.len()
        )
    );
}

#[test]
fn open_reads_only_regular_files() {
    // Issue #13: a device "did not exist", and a FIFO would block the reader.
    assert_eq!(
        GgufFile::open("/dev/null").unwrap_err(),
        Error::NotARegularFile {
            path: "/dev/null".into(),
            kind: "a character device",
        }
    );
    let dir = std::env::temp_dir().join(format!("nextok-gguf-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.gguf");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert!(matches!(
        GgufFile::open(&fifo),
        Err(Error::NotARegularFile { kind: "a FIFO", .. })
    ));
    assert!(matches!(
        GgufFile::open(&dir),
        Err(Error::NotARegularFile {
            kind: "a folder",
            ..
        })
    ));
    let file = dir.join("tiny.gguf");
    std::fs::write(&file, tiny()).unwrap();
    assert_eq!(GgufFile::open(&file).unwrap().tensors().len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
