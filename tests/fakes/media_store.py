"""The media bucket in memory (`domain.ports.ErasableMedia`), with S3MediaStore's rules: a key
holds the last object put there, a missing key reads as None, a listing is by prefix in key
order, and deleting a missing key is no error. tests/integration/test_media_bucket.py holds the
S3 adapter (on moto) to the same checks."""

from __future__ import annotations

from typing import BinaryIO


class MemoryMedia:
    """What was put, what was read, and https pre-signed URLs."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.puts: list[str] = []

    def put(self, key: str, data: bytes, mime: str) -> None:
        self.puts.append(key)
        self.objects[key] = (data, mime)

    def put_file(self, key: str, file: BinaryIO, mime: str) -> None:
        self.put(key, file.read(), mime)

    def get(self, key: str) -> tuple[bytes, str] | None:
        return self.objects.get(key)

    def head(self, key: str) -> tuple[int, str] | None:
        found = self.objects.get(key)
        return (len(found[0]), found[1]) if found is not None else None

    def url(self, key: str, expires_seconds: int) -> str:
        return f"https://media.example.com/{key}?X-Amz-Expires={expires_seconds}&X-Amz-Signature=abc"

    def keys(self, prefix: str) -> list[str]:
        return sorted(key for key in self.objects if key.startswith(prefix))

    def delete(self, keys: list[str]) -> int:
        unique = list(dict.fromkeys(keys))
        for key in unique:
            self.objects.pop(key, None)
        return len(unique)
