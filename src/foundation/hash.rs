//! SHA-256 of byte strings and files, as lowercase hex: how models, tensors, libraries and wheels
//! are identified in reports, manifests and caches.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// Lowercase hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a byte string.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Streams `reader` into `writer`, returning the byte count and the SHA-256 of what passed.
pub fn copy_and_hash(mut reader: impl Read, mut writer: impl Write) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        writer.write_all(&buf[..n])?;
        size += n as u64;
    }
    writer.flush()?;
    Ok((size, hex(&hasher.finalize())))
}

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    copy_and_hash(BufReader::new(file), std::io::sink())
        .map(|(_, h)| h)
        .with_context(|| format!("cannot read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut out = Vec::new();
        let (n, h) = copy_and_hash(&b"abc"[..], &mut out).unwrap();
        assert_eq!(
            (n, out.as_slice(), h.as_str()),
            (3, &b"abc"[..], sha256_hex(b"abc").as_str())
        );
    }
}
