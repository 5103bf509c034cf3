"""Image parts: http(s) URLs, image data URLs and inline images of an image type only."""

from __future__ import annotations

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    Harness,
    kinds,
    refused,
    run,
)

# -- 4. image parts ----------------------------------------------------------------


def _image_run(image: pb.ImagePart) -> pb.RunRequest:
    return pb.RunRequest(
        session_id="img",
        create_session=True,
        messages=[
            pb.Message(
                role=pb.ROLE_USER,
                content=[
                    pb.ContentPart(text=pb.TextPart(text="look")),
                    pb.ContentPart(image=image),
                ],
            )
        ],
    )


@pytest.mark.parametrize(
    "image",
    [
        pb.ImagePart(url="javascript:alert(1)"),
        pb.ImagePart(url="file:///etc/passwd"),
        pb.ImagePart(url="data:text/html;base64,PHNjcmlwdD4="),
        pb.ImagePart(url="ftp://example.com/cat.png"),
        pb.ImagePart(url="//example.com/cat.png"),
        pb.ImagePart(url="https://example.com/cat.png", mime_type="text/html"),
        pb.ImagePart(data=b"<script>", mime_type="text/html"),
        pb.ImagePart(data=b"\x89PNG", mime_type="image"),
        pb.ImagePart(data=b"", mime_type="image/png"),  # the LLM refuses it every turn
        pb.ImagePart(url="data:image/png;base64,!!!"),  # stored, it would fail every turn
        pb.ImagePart(url="data:image/png;base64,"),
    ],
)
async def test_an_image_part_that_is_not_an_http_image_is_invalid_argument_naming_the_part(
    harness: Harness, image: pb.ImagePart
) -> None:
    details = await refused(harness, _image_run(image))

    assert details.startswith("messages[0].content[1].image")
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


@pytest.mark.parametrize(
    "image",
    [
        pb.ImagePart(url="https://example.com/cat.png"),
        pb.ImagePart(url="HTTP://example.com/cat.png", mime_type="image/png"),
        pb.ImagePart(url="data:image/png;base64,iVBORw0KGgo="),
        pb.ImagePart(url="data:image/png;base64,iVBORw0KGgo"),  # padding left out
        pb.ImagePart(url="data:image/svg+xml,%3Csvg%3E%3C/svg%3E"),  # not base64: not decoded
        pb.ImagePart(data=b"\x89PNG", mime_type="image/png"),
        pb.ImagePart(data=b"GIF8", mime_type="IMAGE/GIF"),
    ],
)
async def test_http_and_inline_images_are_accepted(harness: Harness, image: pb.ImagePart) -> None:
    events = await run(harness, _image_run(image))

    assert kinds(events)[-1] == "run_finished"
