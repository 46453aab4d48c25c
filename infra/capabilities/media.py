"""The media bucket (`resources.MEDIA`): inbound attachments the turn fetched once, and the
files a platform fetches by URL (LINE, Twilio). Private: SSE-S3 encryption, every public access
blocked, TLS only, objects owned by the bucket's account, and a lifecycle rule that deletes
objects after `media.retention_days`. An idle bucket costs nothing; each stored object costs its
PUT (about $5 per million) and its storage for the retention period."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from hermes_gateway.resources import BucketSpec
from infra.nag import acknowledge

UPLOADS_PREFIX = "uploads/"
# A forwarder posts a message again for up to a day (the catalog's retry window): its upload
# outlives that by a day.
UPLOADS_DAYS = 2


class MediaBuckets(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, specs: Iterable[BucketSpec], retention_days: int
    ) -> None:
        super().__init__(scope, construct_id)
        self.specs: dict[str, BucketSpec] = {}
        self.buckets: dict[str, s3.Bucket] = {}
        for spec in specs:
            bucket = s3.Bucket(
                self,
                spec.name,
                encryption=s3.BucketEncryption.S3_MANAGED,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                enforce_ssl=True,
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
                lifecycle_rules=[
                    s3.LifecycleRule(
                        id="expire-media",
                        expiration=Duration.days(retention_days),
                        abort_incomplete_multipart_upload_after=Duration.days(1),
                    ),
                    # A forwarder's uploads (platforms/mailbox.py upload_key) are read once, when
                    # their message's turn keeps them under its session; what is left of them goes
                    # soon (no session prefix names them, so a /forget could not find them).
                    s3.LifecycleRule(
                        id="expire-uploads",
                        prefix=UPLOADS_PREFIX,
                        expiration=Duration.days(min(UPLOADS_DAYS, retention_days)),
                    ),
                ],
                # Users' files: kept when the stack is deleted (the lifecycle rule still empties it).
                removal_policy=RemovalPolicy.RETAIN,
            )
            acknowledge(
                bucket,
                "S1",
                f"The {spec.name} bucket holds users' attachments for {retention_days} days and is read only by "
                "the gateway's functions; server access logs would cost a second bucket and a log object per "
                "request. CloudTrail data events can be enabled by an operator who needs an access trail.",
            )
            self.specs[spec.name] = spec
            self.buckets[spec.name] = bucket
