"""roll plugin entry point: registers the example agents (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_agents(register):
    register("frozen_lake_openai", "roll_agent_examples.frozen_lake:play", tags=["FrozenLakeAgent"],
             config_model="roll_agent_examples.frozen_lake:AgentConfig",
             expert="roll_agent_examples.frozen_lake:expert",
             description="FrozenLake played by agent code that only knows the OpenAI API")
    register("number_search", "roll_agent_examples.number_search:NumberSearchAgent", tags=["NumberSearch"],
             description="Find a hidden number with a guess tool that answers higher, lower or correct")
