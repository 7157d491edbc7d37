//! Zip archives from strangers (`.npz` files, report `.zip`s) opened with the checks the `zip`
//! crate does not make: it keys members by name, so of two members with one name only the last is
//! seen, silently. An archive whose central directory lists a name twice is refused.

use std::io::{Read, Seek, SeekFrom};

use anyhow::{bail, Result};

/// The central directory's signature of a file header.
const CENTRAL_HEADER: u32 = 0x0201_4b50;

/// Opens `reader` as a zip archive (`what` names the format in the message when it is none:
/// ".npz", ".zip"), refusing one that holds two members of one name.
pub fn open_zip<R: Read + Seek>(reader: R, what: &str) -> Result<zip::ZipArchive<R>> {
    let open = |r: R| zip::ZipArchive::new(r).map_err(|e| anyhow::anyhow!("not a valid {what} archive: {e}"));
    let archive = open(reader)?;
    let (start, len) = (archive.central_directory_start(), archive.len());
    let mut reader = archive.into_inner();
    if let Some(name) = repeated_name(&mut reader, start, len)? {
        bail!("'{name}' is in the archive twice");
    }
    open(reader)
}

/// The first name the central directory at `start` lists twice, reading at most `len + 1` file
/// headers: the archive was read as `len` distinct names, so more headers than that repeat one.
fn repeated_name<R: Read + Seek>(reader: &mut R, start: u64, len: usize) -> Result<Option<String>> {
    reader.seek(SeekFrom::Start(start))?;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..=len {
        let mut fixed = [0u8; 46];
        if reader.read_exact(&mut fixed).is_err() {
            break;
        }
        if u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) != CENTRAL_HEADER {
            break;
        }
        let field = |at: usize| u64::from(u16::from_le_bytes([fixed[at], fixed[at + 1]]));
        let (name_len, extra_len, comment_len) = (field(28), field(30), field(32));
        let mut name = Vec::new();
        reader.by_ref().take(name_len).read_to_end(&mut name)?;
        if !seen.insert(name.clone()) {
            return Ok(Some(String::from_utf8_lossy(&name).into_owned()));
        }
        reader.seek(SeekFrom::Current(i64::try_from(extra_len + comment_len).unwrap_or(0)))?;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};

    fn zip_of(names: &[&str]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        for n in names {
            w.start_file(*n, options).unwrap();
            w.write_all(n.as_bytes()).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn a_name_listed_twice_is_found_and_distinct_names_pass() {
        let bytes = zip_of(&["a.npy", "b.npy", "c.npy"]);
        assert!(open_zip(Cursor::new(bytes.clone()), ".npz").is_ok());
        // The same archive with its second name changed to the first's wherever it is written:
        // what a hostile writer makes.
        let bytes = bytes.windows(5).enumerate().fold(bytes.clone(), |mut out, (i, w)| {
            if w == b"b.npy" {
                out[i..i + 5].copy_from_slice(b"a.npy");
            }
            out
        });
        let err = open_zip(Cursor::new(bytes), ".npz").unwrap_err().to_string();
        assert_eq!(err, "'a.npy' is in the archive twice");
        let err = open_zip(Cursor::new(b"PK\x03\x04 no".to_vec()), ".zip")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("not a valid .zip archive: "), "{err}");
    }
}
