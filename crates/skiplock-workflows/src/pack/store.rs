//! Where artifacts go: an `object_store` chosen by `SKIPLOCK_STORE` (a local directory, or
//! `s3://bucket/prefix` with endpoint and credentials from the usual AWS environment
//! variables). Both kinds overwrite atomically: the local store writes a staging file and
//! renames it over the old one; S3 replaces an object in one PUT (or one multipart
//! completion), so readers never see half a file.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::AsyncReadExt;

use crate::error::{Error, Result};

/// Files up to this size are uploaded with a single PUT; larger ones in parts.
const SINGLE_PUT_MAX: u64 = 32 * 1024 * 1024;
/// Part size of a multipart upload (S3 wants at least 5 MiB).
const PART: usize = 8 * 1024 * 1024;

/// The artifact store.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The setting it was opened from, recorded with each pack.
    pub spec: String,
    /// The local directory, when the store is one.
    pub local_dir: Option<PathBuf>,
}

fn store_err(e: object_store::Error) -> Error {
    Error::Other(format!("object store: {e}"))
}

/// The object key of a host's artifact.
pub fn key_for(host: &str) -> Path {
    Path::from_iter(["packs", &format!("{host}.sqlite")])
}

impl Store {
    /// Opens the store `spec` names: `s3://bucket[/prefix]`, or a local directory (created
    /// if missing).
    pub fn open(spec: &str) -> Result<Store> {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::config(
                    "SKIPLOCK_STORE",
                    "s3:// URL has no bucket (write s3://bucket/prefix)",
                ));
            }
            let s3 = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .build()
                .map_err(|e| Error::config("SKIPLOCK_STORE", e.to_string()))?;
            let prefix = prefix.trim_matches('/');
            let inner: Arc<dyn ObjectStore> = if prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(PrefixStore::new(s3, prefix))
            };
            return Ok(Store {
                inner,
                spec: spec.to_string(),
                local_dir: None,
            });
        }
        if spec.is_empty() || spec.contains("://") {
            return Err(Error::config(
                "SKIPLOCK_STORE",
                format!("{spec:?} is neither a directory nor an s3:// URL"),
            ));
        }
        std::fs::create_dir_all(spec).map_err(|e| {
            Error::config(
                "SKIPLOCK_STORE",
                format!("cannot create directory {spec:?}: {e}"),
            )
        })?;
        let dir = std::fs::canonicalize(spec)?;
        let fs = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| Error::config("SKIPLOCK_STORE", e.to_string()))?;
        Ok(Store {
            inner: Arc::new(fs),
            spec: spec.to_string(),
            local_dir: Some(dir),
        })
    }

    /// Where an object lives, for people: a file path for a local store, else the URL.
    pub fn location(&self, key: &Path) -> String {
        match &self.local_dir {
            Some(d) => d.join(key.as_ref()).display().to_string(),
            None => format!("{}/{}", self.spec.trim_end_matches('/'), key),
        }
    }

    /// Uploads the file at `file` (of `size` bytes) to `key`, replacing any older object
    /// atomically. Returns only once the store has the whole object.
    pub async fn upload(&self, key: &Path, file: &FsPath, size: u64) -> Result<()> {
        if size <= SINGLE_PUT_MAX {
            let bytes = tokio::fs::read(file).await?;
            self.inner
                .put(key, PutPayload::from(bytes))
                .await
                .map_err(store_err)?;
            return Ok(());
        }
        let upload = self.inner.put_multipart(key).await.map_err(store_err)?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut f = tokio::fs::File::open(file).await?;
        let mut buf = vec![0u8; PART];
        let result: Result<()> = async {
            loop {
                let n = f.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                w.wait_for_capacity(4).await.map_err(store_err)?;
                w.write(&buf[..n]);
            }
        }
        .await;
        match result {
            Ok(()) => {
                w.finish().await.map_err(store_err)?;
                Ok(())
            }
            Err(e) => {
                let _ = w.abort().await;
                Err(e)
            }
        }
    }

    /// Reads a whole object (tests and tools).
    pub async fn get(&self, key: &Path) -> Result<bytes::Bytes> {
        let r = self.inner.get(key).await.map_err(store_err)?;
        r.bytes().await.map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_the_port() {
        assert_eq!(key_for("example.com").as_ref(), "packs/example.com.sqlite");
        assert_eq!(
            key_for("127.0.0.1:8080").as_ref(),
            "packs/127.0.0.1:8080.sqlite"
        );
    }

    #[test]
    fn bad_specs_are_config_errors() {
        assert!(matches!(Store::open("s3://"), Err(Error::Config { .. })));
        assert!(matches!(Store::open("gs://x"), Err(Error::Config { .. })));
    }

    #[tokio::test]
    async fn local_uploads_replace_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().to_str().unwrap()).unwrap();
        let key = key_for("h");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b"one").unwrap();
        store.upload(&key, f.path(), 3).await.unwrap();
        std::fs::write(f.path(), b"second").unwrap();
        store.upload(&key, f.path(), 6).await.unwrap();
        assert_eq!(&store.get(&key).await.unwrap()[..], b"second");
        assert_eq!(std::fs::read(store.location(&key)).unwrap(), b"second");
        // Only the object itself is left: the staging file was renamed over it.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("packs"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
