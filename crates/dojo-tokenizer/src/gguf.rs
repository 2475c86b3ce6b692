//! A GGUF *metadata* reader (the key/value header only; tensors are the engine's business).
//!
//! Curate and train need a model's tokenizer and chat template without pulling in candle, and
//! everything they need is in the header: `tokenizer.ggml.*` and `tokenizer.chat_template`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::ChatError;

/// One metadata value, as typed in the file.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer type as u64 (negative values are rejected).
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            GgufValue::U8(v) => v as u64,
            GgufValue::U16(v) => v as u64,
            GgufValue::U32(v) => v as u64,
            GgufValue::U64(v) => v,
            GgufValue::I8(v) => u64::try_from(v).ok()?,
            GgufValue::I16(v) => u64::try_from(v).ok()?,
            GgufValue::I32(v) => u64::try_from(v).ok()?,
            GgufValue::I64(v) => u64::try_from(v).ok()?,
            _ => return None,
        })
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// The metadata header of a GGUF file.
#[derive(Debug, Clone)]
pub struct GgufMetadata {
    pub path: PathBuf,
    pub version: u32,
    pub tensor_count: u64,
    pub kv: BTreeMap<String, GgufValue>,
}

impl GgufMetadata {
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.kv.get(key)
    }

    /// A string value; `Err` names the file and key when missing or mistyped.
    pub fn str(&self, key: &str) -> Result<&str, ChatError> {
        self.get(key)
            .and_then(GgufValue::as_str)
            .ok_or_else(|| self.missing(key, "a string"))
    }

    pub fn u64(&self, key: &str) -> Result<u64, ChatError> {
        self.get(key)
            .and_then(GgufValue::as_u64)
            .ok_or_else(|| self.missing(key, "an integer"))
    }

    pub fn string_array(&self, key: &str) -> Result<Vec<&str>, ChatError> {
        let arr = self
            .get(key)
            .and_then(GgufValue::as_array)
            .ok_or_else(|| self.missing(key, "an array of strings"))?;
        arr.iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| self.missing(key, "an array of strings"))
            })
            .collect()
    }

    fn missing(&self, key: &str, what: &str) -> ChatError {
        ChatError::Gguf {
            path: self.path.clone(),
            reason: format!("metadata key `{key}` is missing or is not {what}"),
        }
    }
}

const MAX_STRING: u64 = 64 << 20;
const MAX_ARRAY: u64 = 1 << 28;

struct Reader<R> {
    r: R,
    path: PathBuf,
}

impl<R: Read> Reader<R> {
    fn err(&self, reason: impl Into<String>) -> ChatError {
        ChatError::Gguf {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    /// The header failed at `what` on an underlying error, which stays the cause.
    fn read_err(
        &self,
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> ChatError {
        ChatError::GgufRead {
            path: self.path.clone(),
            what,
            source: Box::new(source),
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], ChatError> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|e| self.read_err("truncated header", e))?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, ChatError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, ChatError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> Result<String, ChatError> {
        let n = self.u64()?;
        if n > MAX_STRING {
            return Err(self.err(format!("string of {n} bytes is implausible")));
        }
        let mut buf = vec![0u8; n as usize];
        self.r
            .read_exact(&mut buf)
            .map_err(|e| self.read_err("truncated header", e))?;
        String::from_utf8(buf).map_err(|e| self.read_err("string is not UTF-8", e))
    }

    fn value(&mut self, ty: u32) -> Result<GgufValue, ChatError> {
        Ok(match ty {
            0 => GgufValue::U8(u8::from_le_bytes(self.bytes()?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.bytes()?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.bytes()?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.bytes()?)),
            4 => GgufValue::U32(self.u32()?),
            5 => GgufValue::I32(i32::from_le_bytes(self.bytes()?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.bytes()?)),
            7 => GgufValue::Bool(self.bytes::<1>()?[0] != 0),
            8 => GgufValue::String(self.string()?),
            9 => {
                let et = self.u32()?;
                let n = self.u64()?;
                if n > MAX_ARRAY {
                    return Err(self.err(format!("array of {n} elements is implausible")));
                }
                let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
                for _ in 0..n {
                    v.push(self.value(et)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::U64(self.u64()?),
            11 => GgufValue::I64(i64::from_le_bytes(self.bytes()?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.bytes()?)),
            other => return Err(self.err(format!("unknown metadata value type {other}"))),
        })
    }
}

/// Read the metadata header of the GGUF file at `path` (versions 2 and 3).
pub fn read_metadata(path: &Path) -> Result<GgufMetadata, ChatError> {
    let f = File::open(path).map_err(|source| ChatError::GgufOpen {
        path: path.to_path_buf(),
        source,
    })?;
    let mut r = Reader {
        r: BufReader::with_capacity(1 << 20, f),
        path: path.to_path_buf(),
    };
    let magic = r.bytes::<4>()?;
    if &magic != b"GGUF" {
        return Err(r.err("not a GGUF file (bad magic)"));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(r.err(format!("unsupported GGUF version {version}")));
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    let mut kv = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let ty = r.u32()?;
        let value = r.value(ty)?;
        kv.insert(key, value);
    }
    Ok(GgufMetadata {
        path: path.to_path_buf(),
        version,
        tensor_count,
        kv,
    })
}
