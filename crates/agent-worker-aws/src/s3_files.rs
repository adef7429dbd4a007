//! [`S3FileArea`]: the files people attach, in an S3 bucket. A file is the object
//! `<prefix><owner>/<id>`, its reference (the checked [`AttachmentRef`]) the object beside it,
//! `<prefix><owner>/<id>.json`, written by whatever checked the upload. The tokens the
//! conversation's files gave the model are counted in `<prefix><owner>/.usage`.

use agent_worker_core::Failure;
use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;

use agent_worker_core::engine::attachments::{
    FileArea, LoadAs, PresignedUpload, Unavailable, decode_reference, owner_segment, plain_segment,
};
use agent_worker_core::protocol::AttachmentRef;

/// The object beside a conversation's files that keeps its token count.
const USAGE_OBJECT: &str = ".usage";

/// The most a file's read reserves ahead from the length S3 gives: the largest file the engine
/// reads whole; past it, the buffer grows as the bytes come.
const MAX_RESERVED_BYTES: usize = agent_worker_core::engine::attachments::MAX_DOCUMENT_BYTES;

/// A file area in an S3 bucket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct S3FileArea {
    client: Client,
    bucket: String,
    prefix: String,
}

/// What failed when a conversation's files could not be deleted.
const DELETING: &str = "the conversation's files cannot be deleted";

/// An S3 call's failure: a missing object is [`Unavailable::Gone`]; anything else keeps the
/// SDK's error (the service's code and message) as the source.
fn store_error<E, R>(e: SdkError<E, R>) -> Unavailable
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = e
        .as_service_error()
        .and_then(|s| s.code())
        .unwrap_or_default()
        .to_owned();
    if matches!(code.as_str(), "NoSuchKey" | "NotFound") {
        return Unavailable::Gone;
    }
    Unavailable::Store(Failure::caused_by("the S3 call failed", e))
}

impl S3FileArea {
    /// Files in `bucket`, under `prefix` (such as `attachments/`; may be empty).
    pub fn new(client: Client, bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    /// The key of file `id` of `owner`: `<prefix><owner>/<id>`, the owner as [`owner_segment`]
    /// escapes it (so a conversation `a` never lists the files of a conversation `a/b`).
    fn key(&self, owner: &str, id: &str) -> Result<String, Unavailable> {
        match (owner_segment(owner), plain_segment(id)) {
            (Some(owner), Some(id)) => Ok(format!("{}{owner}/{id}", self.prefix)),
            _ => Err(Unavailable::Gone),
        }
    }

    /// The key prefix of `owner`'s files.
    fn owner_prefix(&self, owner: &str) -> Result<String, Unavailable> {
        Ok(format!(
            "{}{}/",
            self.prefix,
            owner_segment(owner).ok_or(Unavailable::Gone)?
        ))
    }

    /// A listing of the objects under `prefix`.
    fn listing(
        &self,
        prefix: &str,
    ) -> aws_sdk_s3::operation::list_objects_v2::builders::ListObjectsV2FluentBuilder {
        self.client.list_objects_v2().bucket(&self.bucket).prefix(prefix)
    }

    /// Stores `bytes` as file `reference.id` of `owner`, and its reference beside it (for hosts
    /// that check uploads, and for tests).
    pub async fn put(
        &self,
        owner: &str,
        reference: &AttachmentRef,
        bytes: Vec<u8>,
    ) -> Result<(), Unavailable> {
        let key = self.key(owner, &reference.id)?;
        self.put_object(key.clone(), bytes, &reference.media_type).await?;
        self.put_reference(&key, reference).await
    }

    /// Keeps `reference` beside the file at `key`.
    async fn put_reference(&self, key: &str, reference: &AttachmentRef) -> Result<(), Unavailable> {
        let json = serde_json::to_vec(reference)
            .map_err(|e| Unavailable::Store(Failure::caused_by("the reference does not encode", e)))?;
        self.put_object(format!("{key}.json"), json, "application/json")
            .await
    }

    async fn put_object(&self, key: String, body: Vec<u8>, content_type: &str) -> Result<(), Unavailable> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn get(&self, key: String, range: Option<Range<u64>>) -> Result<Vec<u8>, Unavailable> {
        let mut request = self.client.get_object().bucket(&self.bucket).key(key);
        if let Some(range) = range {
            if range.end <= range.start {
                return Ok(Vec::new());
            }
            request = request.range(format!("bytes={}-{}", range.start, range.end - 1));
        }
        let object = request.send().await.map_err(store_error)?;
        // Read into one buffer of the object's length as its chunks come: collecting them first
        // and copying the whole would hold a large file two or three times at once.
        let length = object
            .content_length()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let mut bytes = Vec::with_capacity(length.min(MAX_RESERVED_BYTES));
        let mut body = object.body;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| Unavailable::Store(Failure::caused_by("the file's bytes cannot be read", e)))?
        {
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

#[async_trait]
impl agent_worker_core::engine::attachments::FileUploads for S3FileArea {
    async fn upload(
        &self,
        owner: &str,
        reference: &AttachmentRef,
        bytes: Vec<u8>,
    ) -> Result<(), Unavailable> {
        self.put(owner, reference, bytes).await
    }

    /// The reference is kept now; the URL takes the file's bytes with exactly its media type
    /// and length, which are signed into it.
    async fn presign_upload(
        &self,
        owner: &str,
        reference: &AttachmentRef,
        expires_in: Duration,
    ) -> Result<Option<PresignedUpload>, Unavailable> {
        let key = self.key(owner, &reference.id)?;
        let length = i64::try_from(reference.size)
            .map_err(|e| Unavailable::Store(Failure::caused_by("the file's size", e)))?;
        let config = PresigningConfig::expires_in(expires_in)
            .map_err(|e| Unavailable::Store(Failure::caused_by("the upload cannot be signed", e)))?;
        let presigned = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type(&reference.media_type)
            .content_length(length)
            .presigned(config)
            .await
            .map_err(store_error)?;
        self.put_reference(&key, reference).await?;
        Ok(Some(PresignedUpload {
            url: presigned.uri().to_owned(),
            method: presigned.method().to_owned(),
            headers: presigned
                .headers()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            expires_in: expires_in.as_secs(),
        }))
    }
}

#[async_trait]
impl FileArea for S3FileArea {
    /// A presigned `GetObject`, answered as a download of its media type.
    async fn presign_download(
        &self,
        id: &str,
        owner: &str,
        expires_in: Duration,
    ) -> Result<Option<String>, Unavailable> {
        let config = PresigningConfig::expires_in(expires_in)
            .map_err(|e| Unavailable::Store(Failure::caused_by("the link cannot be signed", e)))?;
        let presigned = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.key(owner, id)?)
            .response_content_disposition("attachment")
            .presigned(config)
            .await
            .map_err(store_error)?;
        Ok(Some(presigned.uri().to_owned()))
    }

    async fn reference(&self, id: &str, owner: &str) -> Result<AttachmentRef, Unavailable> {
        let json = self.get(format!("{}.json", self.key(owner, id)?), None).await?;
        decode_reference(&json)
    }

    async fn load(
        &self,
        id: &str,
        owner: &str,
        _load_as: LoadAs,
        range: Option<Range<u64>>,
    ) -> Result<Vec<u8>, Unavailable> {
        self.get(self.key(owner, id)?, range).await
    }

    async fn list(&self, owner: &str) -> Result<Vec<AttachmentRef>, Unavailable> {
        let owner_prefix = self.owner_prefix(owner)?;
        let mut pages = self.listing(&owner_prefix).into_paginator().send();
        let mut references = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(store_error)?;
            for object in page.contents() {
                let Some(id) = object
                    .key()
                    .and_then(|k| k.strip_prefix(&owner_prefix))
                    .and_then(|k| k.strip_suffix(".json"))
                else {
                    continue;
                };
                references.push(self.reference(id, owner).await?);
            }
        }
        Ok(references)
    }

    async fn conversation_usage(&self, owner: &str) -> Option<u64> {
        let bytes = self.get(self.key(owner, USAGE_OBJECT).ok()?, None).await.ok()?;
        std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
    }

    async fn remove_conversation(&self, owner: &str) -> Result<u64, Unavailable> {
        use aws_sdk_s3::types::{Delete, ObjectIdentifier};
        let owner_prefix = self.owner_prefix(owner)?;
        let mut pages = self.listing(&owner_prefix).into_paginator().send();
        let mut files = 0;
        while let Some(page) = pages.next().await {
            let page = page.map_err(store_error)?;
            let keys: Vec<&str> = page.contents().iter().filter_map(|o| o.key()).collect();
            files += keys
                .iter()
                .filter(|k| !k.ends_with(".json") && !k.ends_with(USAGE_OBJECT))
                .count() as u64;
            // A listing page holds at most 1,000 keys: one DeleteObjects call each.
            let objects = keys
                .iter()
                .map(|k| ObjectIdentifier::builder().key(*k).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Unavailable::Store(Failure::caused_by(DELETING, e)))?;
            if objects.is_empty() {
                continue;
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| Unavailable::Store(Failure::caused_by(DELETING, e)))?;
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(store_error)?;
            if let Some(failed) = out.errors().first() {
                return Err(Unavailable::Store(
                    format!(
                        "{} of the conversation's files were not deleted (first: {})",
                        out.errors().len(),
                        failed.message().unwrap_or("no reason given")
                    )
                    .into(),
                ));
            }
        }
        Ok(files)
    }

    async fn record_usage(&self, owner: &str, tokens: u64) -> Result<(), Unavailable> {
        let key = self.key(owner, USAGE_OBJECT)?;
        let used = self.conversation_usage(owner).await.unwrap_or(0);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("text/plain")
            .body(ByteStream::from(
                used.saturating_add(tokens).to_string().into_bytes(),
            ))
            .send()
            .await
            .map_err(store_error)?;
        Ok(())
    }
}
