"""`DocumentState`: everything the server keeps about one document, in one object.

Role: the server holds one `DocumentState` per document URI it has seen (`CudiceServer.documents`);
the flows (verification, prebuild, generation, candidacy) and the handlers read and change a
document's state there, instead of in parallel dictionaries keyed by URI.

Contract:
- `analysis` is the verifier's document model of one text, its line index and the reference path
  it names, computed once per (text, position encoding) by `CudiceServer.analyse`; the reference's
  text is read from disk each time a verification keys its result (`read_reference`): it may
  change while the candidate's text does not;
- `latest` is the verdict shown for the document (hover, lens, `cudice/status`), `edited` whether
  the buffer's text differs from the text of that verdict, `flagged` whether a non-candidate shows
  its Python syntax error;
- `building` counts the verifications of the document starting or running (`start_building`,
  `end_building`; `wait_not_building` wakes when it is back to 0), `running_key` is the
  result key (text, reference, settings) of the newest of them, `closes` counts the editor's
  `didClose` notifications (a run that is still starting compares it), `closed_while_verified`
  that the last close cancelled a verification (a reopen verifies again), `saved` says a `didSave`
  arrived;
- `watched_reference` / `reference_digest`: the reference file watched for this document and the
  digest of the text it was last verified with (re-verified only when that text changes);
- `reference_findings`: the findings of its latest verdict located in its reference file, which
  the reference's own buffer shows too (publishing.py);
- `generation_cancel` is the cancel event of its running generation, `prebuild_timer` the pending
  timer of its build-while-editing.
Nothing here sends messages or starts work: this module is data plus small pure helpers.

Not covered: forgetting the state of closed documents (their verdict is shown again on reopen; the
parse results are bounded by `MAX_ANALYSES` across documents instead).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudice.verifier.source.document import Document
    from cudice.verifier.source.positions import LineIndex
    from cudice.verifier.source.result import Diagnostic, VerifyResult

# How many documents keep their parsed text at once (a parse is recomputed after a drop).
MAX_ANALYSES = 256


@dataclass(frozen=True, slots=True)
class Latest:
    """The newest result shown for a document, and the version, key and text it was computed for."""

    version: int | None
    key: str
    result: VerifyResult
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    """One text of a document, parsed: the verifier's document model and the line index in the
    client's position encoding."""

    source: str
    doc: Document
    index: LineIndex
    reference: str | None  # `named_reference(doc)`


def named_reference(doc: Document) -> str | None:
    """The reference file a candidate names in its `# cudice: reference=` comment, resolved as the
    verifier resolves it; None when the file is its own reference or names none."""
    if doc.reference.origin != "comment":
        return None
    from cudice.verifier.source.reference import reference_path

    found = reference_path(doc)
    return str(found) if found is not None else None


def read_reference(path: str | None) -> ReferenceInfo:
    """The reference at `path` with its text as it is on disk now (any bytes: it is only hashed)."""
    if path is None:
        return ReferenceInfo(None, None)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return ReferenceInfo(path, f.read())
    except OSError:
        return ReferenceInfo(path, None)


@dataclass(frozen=True, slots=True)
class ReferenceInfo:
    """The reference a text names, as the verifier resolves it: its path (None when the file is its
    own reference or names none) and that file's text on disk (None when absent or unreadable)."""

    path: str | None
    text: str | None

    @property
    def digest(self) -> str | None:
        return text_digest(self.text)


def text_digest(text: str | None) -> str | None:
    """sha256 of `text` (any code points: surrogates kept), None for None."""
    return None if text is None else hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True)
class ReferenceFindings:
    """Findings of a document's verdict located in its reference file, and the digest of the
    reference text they were found in (`text_digest`; None when it was not read)."""

    digest: str | None = None
    diagnostics: tuple[Diagnostic, ...] = ()


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass(slots=True)
class DocumentState:
    """What the server keeps about the document at `uri` (see the module docstring)."""

    uri: str
    analysis: Analysis | None = None
    latest: Latest | None = None
    edited: bool = False
    flagged: bool = False
    saved: bool = False
    closes: int = 0
    closed_while_verified: bool = False
    building: int = 0
    not_building: asyncio.Event = field(default_factory=_set_event)  # set exactly while building == 0
    running_key: str | None = None
    pending_cancel: asyncio.Event | None = None  # a verification's, until its job is registered
    watched_reference: str | None = None
    reference_digest: str | None = None
    reference_findings: ReferenceFindings = ReferenceFindings()
    generation_cancel: asyncio.Event | None = None
    prebuild_timer: asyncio.TimerHandle | None = None

    def analysed(self, source: str, encoding: str) -> Analysis | None:
        """The analysis of `source` in `encoding` when it is the one kept, else None."""
        found = self.analysis
        if found is not None and found.source == source and found.index.encoding == encoding:
            return found
        return None

    def start_building(self) -> None:
        """A verification of the document starts (counted in `building` until `end_building`)."""
        self.building += 1
        self.not_building.clear()

    def end_building(self) -> None:
        self.building -= 1
        if self.building == 0:
            self.not_building.set()

    async def wait_not_building(self) -> None:
        """Return once no verification of the document is starting or running; one that starts
        meanwhile is waited for too. Woken by `end_building`, never by a timer."""
        while self.building:
            await self.not_building.wait()

    def cancel_prebuild_timer(self) -> None:
        timer, self.prebuild_timer = self.prebuild_timer, None
        if timer is not None:
            timer.cancel()
