"""tokenpilot[langgraph]'s first use: the README's "New agent: one call", with a scripted model."""

from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from tokenpilot_langgraph import create_tokenpilot_agent, thread_stats
from tokenpilot_langgraph.testing import ScriptedChatModel, answer, tool_call


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21 C\n" * 4000


model = ScriptedChatModel(replies=[tool_call("lookup", {"city": "Oslo"}), answer("Sunny in Oslo.")])
tools = [lookup]

graph = create_tokenpilot_agent(model, tools, checkpointer=InMemorySaver(), prompt="You are a weather agent.")
config = {"configurable": {"thread_id": "t1"}}
out = graph.invoke({"messages": [("user", "Weather in Oslo?")]}, config)
print(thread_stats(graph.tokenpilot, "t1"))
assert out["messages"][-1].content == "Sunny in Oslo.", out["messages"][-1]
