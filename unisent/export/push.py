"""``unisent export --push-to ORG/NAME``: publish an export on the Hugging Face Hub with huggingface_hub."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PushError", "push_to_hub"]


class PushError(RuntimeError):
    """The export could not be uploaded (offline, no token, refused): one line, the export stays on disk."""


def push_to_hub(
    folder: str | os.PathLike, repo_id: str, *, private: bool = False, commit_message: str | None = None
) -> str:
    """Create the model repository ``repo_id`` (if needed) and upload ``folder`` with
    ``huggingface_hub.upload_folder``; returns the commit URL.

    Raises:
        PushError: offline (``HF_HUB_OFFLINE``), the hub cannot be reached, or the hub refused.
    """
    from huggingface_hub import create_repo, upload_folder

    from ..encoders.loading import _hub_reachable, _offline

    folder = Path(folder)
    later = f"the export is in {folder}; upload it later with `hf upload {repo_id} {folder}`"
    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise PushError(f"--push-to {repo_id!r}: give the repository as ORG/NAME (or USER/NAME)")
    if _offline():
        raise PushError(f"--push-to {repo_id}: HF_HUB_OFFLINE is set, nothing was uploaded; {later}")
    if not _hub_reachable():
        raise PushError(f"--push-to {repo_id}: the Hugging Face Hub cannot be reached, nothing was uploaded; {later}")
    try:
        create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            commit_message=commit_message or f"Upload {folder.name} exported by unisent",
        )
    except Exception as err:  # noqa: BLE001 - auth, refusal, network: one line, the export stays
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise PushError(f"--push-to {repo_id}: the upload failed ({type(err).__name__}: {first}); {later}") from None
    return str(getattr(info, "commit_url", info))
