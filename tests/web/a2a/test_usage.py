"""A2A: the tokens a task used are in its metadata, and each run's on its final status
update (issue 21)."""

from __future__ import annotations

from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.a2a.conftest import Rpc, user_message


def test_a_task_carries_its_token_usage_in_its_metadata(rpc: Rpc, llm: FakeOpenAI) -> None:
    llm.enqueue(FakeReply(text="counted", usage=(40, 2), cached_tokens=32))
    task = rpc.result("SendMessage", {"message": user_message("hi")})["task"]
    usage = {"inputTokens": 40, "outputTokens": 2, "totalTokens": 42, "cachedTokens": 32}
    assert task["metadata"] == {"usage": usage}
    got = rpc.result("GetTask", {"id": task["id"]})
    assert got["metadata"] == {"usage": usage}


def test_the_final_status_update_carries_the_runs_usage(rpc: Rpc, llm: FakeOpenAI) -> None:
    llm.enqueue(FakeReply(text="streamed", usage=(12, 3)))
    replies = rpc.stream("SendStreamingMessage", {"message": user_message("go")})
    final = replies[-1]["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert final["metadata"]["usage"] == {
        "inputTokens": 12,
        "outputTokens": 3,
        "totalTokens": 15,
        "cachedTokens": 0,
    }
