"""``unisent export --push-to ORG/NAME``: publish an export on the Hugging Face Hub with huggingface_hub."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["PushError", "check_repo_id", "push_to_hub", "redact_token"]


#: a Hugging Face access token as it may appear in a message
_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}")


def redact_token(text: str) -> str:
    """``text`` without the Hub token in use (``HF_TOKEN`` or the stored login) or anything shaped like
    one (``hf_...``): a library's error message is shown to the user and may end in a log."""
    from huggingface_hub import get_token

    try:
        token = get_token()
    except Exception:  # noqa: BLE001 - an unreadable token file: nothing to redact but the pattern
        token = None
    if token:
        text = text.replace(token, "hf_***")
    return _TOKEN.sub("hf_***", text)


class PushError(RuntimeError):
    """The export could not be uploaded (offline, no token, refused): one line, the export stays on disk."""


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is a Hub model repository name ``ORG/NAME`` (huggingface_hub's rules: letters,
    digits, ``-``, ``_``, ``.``; no ``..`` or ``--``; at most 96 characters per part), checked before
    anything is exported or sent.

    Raises:
        PushError: naming the value and what is wrong with it.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    shown = repr(repo_id) if len(repo_id) <= 120 else repr(repo_id[:120] + "...")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise PushError(f"--push-to {shown}: give the repository as ORG/NAME (or USER/NAME)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        reason = str(err).split(":")[0].rstrip(".")
        raise PushError(f"--push-to {shown} is not a Hub repository name: {reason}") from None
    return repo_id


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
    check_repo_id(repo_id)
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
        first = redact_token(str(err).strip().splitlines()[0]) if str(err).strip() else ""
        raise PushError(f"--push-to {repo_id}: the upload failed ({type(err).__name__}: {first}); {later}") from None
    return str(getattr(info, "commit_url", info))
