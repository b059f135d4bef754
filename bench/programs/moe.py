"""A sparse mixture-of-experts language model, with the routing written as Hugging Face's
Mixtral (``MixtralSparseMoeBlock``) writes it.

Token embeddings, 2 layers of RMSNorm then a mixture of 8 SwiGLU experts (width 128,
hidden 256) with a residual, a final RMSNorm and a linear head. The router: a Linear,
softmax in float, ``torch.topk`` of 2, the weights renormalized; per expert, the tokens
routed to it found by ``torch.where`` on a ``one_hot`` mask, gathered, run and scattered
back by ``index_add_``. Next-token cross-entropy plus 0.01 of the Switch Transformer's
load-balancing loss; AdamW. Vocabulary 256, batch 16 of 32 tokens. Compiled: the model
(the per-expert token counts depend on the data).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "moe"
VOCAB, DIM, HIDDEN, EXPERTS, TOP_K, LAYERS, BATCH, SEQ = 256, 128, 256, 8, 2, 2, 16, 32


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        return self.w2(current_hidden_states)


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_experts, self.top_k = EXPERTS, TOP_K
        self.gate = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP() for _ in range(EXPERTS)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim),
                                          dtype=hidden_states.dtype, device=hidden_states.device)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


def load_balancing_loss_func(router_logits, num_experts, top_k):
    """The Switch Transformer's auxiliary loss over every layer's router logits."""
    concatenated = torch.cat(list(router_logits), dim=0)
    routing_weights = F.softmax(concatenated, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.post_attention_layernorm = nn.RMSNorm(DIM, eps=1e-5)
        self.block_sparse_moe = MixtralSparseMoeBlock()

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states, router_logits = self.block_sparse_moe(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states, router_logits


class MoELM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([DecoderLayer() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(DIM, eps=1e-5)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        all_router_logits = ()
        for layer in self.layers:
            hidden_states, router_logits = layer(hidden_states)
            all_router_logits += (router_logits,)
        return self.lm_head(self.norm(hidden_states)), all_router_logits


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [torch.from_numpy(r.integers(0, VOCAB, (BATCH, SEQ))) for _ in range(4)]
        self.model = MoELM()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        input_ids = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        logits, router_logits = self.forward(input_ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), input_ids[:, 1:].reshape(-1))
        loss = loss + 0.01 * load_balancing_loss_func(router_logits, EXPERTS, TOP_K)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
