"""roll-core's built-in RLVR rewards, registered through the public hook."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_rewards(register):
    register("math_verify", "roll_core.rewards.math:math_verify_reward", tags=["math", "math_rule"],
             requires=["math-verify>=0.7"],
             description="1 if the final answer equals the reference mathematically (math-verify)")
    register("regex", "roll_core.rewards.format:regex_reward", tags=["format"],
             description="1 if the response matches a pattern (format reward)")
    register("code_sandbox", "roll_core.rewards.code:CodeSandboxReward", tags=["code", "code_sandbox"],
             description="1 if the response's code passes every test of its row (ROLL's test_cases / case_type), "
                         "run in roll's sandbox (docs/sandbox.md) or a sandbox service (code_url, use_local: false)")
    register("llm_judge", "roll_core.rewards.judge:LLMJudge", tags=["llm_judge", "judge"],
             description="an LLM judge's verdict on the response against the reference (ROLL's judge_prompt, "
                         "judge_model_type api|inference, judge_api_url, judge_model_name, judge_api_key)")
    register("reward_model", "roll_core.rewards.reward_model:SequenceClassifierReward", tags=["reward_model"],
             requires=["transformers"],
             description="a sequence-classification reward model's score (model_args), in reward workers")
    register("generative_reward_model", "roll_core.rewards.generative_rm:GenerativeReward",
             tags=["generative_reward_model", "generative_rm", "genrm"], requires=["transformers"],
             description="a causal LM's probability of the positive verdict (verdict_tokens) to a judge_prompt "
                         "question about the response (model_args), in reward workers")
