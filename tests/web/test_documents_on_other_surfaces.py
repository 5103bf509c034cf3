"""A document part (which only AG-UI sends) in a stored message, as the other surfaces show
it: ``/agentik`` as a text note naming it, A2A as a raw part with its bytes and name."""

from __future__ import annotations

from agentik.a2a.convert import _a2a_part
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.shapes import part_json

PDF = pb.DocumentPart(data=b"%PDF-1.4", mime_type="application/pdf", filename="a.pdf")
HANDLE = pb.DocumentPart(file_id="file-abc")


def test_agentik_shows_a_document_as_a_note_naming_it() -> None:
    inline = part_json(pb.ContentPart(document=PDF))
    held = part_json(pb.ContentPart(document=HANDLE))

    assert inline == {"type": "text", "text": "[document a.pdf (application/pdf, 8 bytes)]"}
    assert held == {"type": "text", "text": "[document (provider file file-abc)]"}


def test_a2a_shows_an_inline_document_as_a_raw_part_and_a_handle_as_a_note() -> None:
    inline = _a2a_part(pb.ContentPart(document=PDF))
    held = _a2a_part(pb.ContentPart(document=HANDLE))

    assert (inline.raw, inline.media_type, inline.filename) == (
        b"%PDF-1.4",
        "application/pdf",
        "a.pdf",
    )
    assert held.text == "[document: provider file file-abc]"
