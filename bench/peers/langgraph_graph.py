"""LangGraph's graph for its Agent Server: one model node, no tools, on the fake OpenAI server.

Loaded by ``langgraph_api`` (the in-memory runtime, as ``langgraph dev`` runs it) from
``bench/peers/langgraph_server.py`` in ``.bench-venvs/langgraph``, as the assistant
``agent``. ``OPENAI_BASE_URL`` points at the fake.
"""

from __future__ import annotations

import os

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

model = ChatOpenAI(
    model="bench", base_url=os.environ["OPENAI_BASE_URL"], api_key="bench", streaming=True
)


async def answer(state: MessagesState) -> dict[str, object]:
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
