"""torch helpers (torch is imported here, not by ``corral``)."""

import torch


def unpack_bitmask(bitmask, vocab_size):
    """A bool tensor ``[batch, vocab_size]``: True where the bitmask allows the token."""
    bitmask = torch.as_tensor(bitmask)
    if bitmask.dim() == 1:
        bitmask = bitmask.unsqueeze(0)
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = (bitmask.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def apply_token_bitmask_inplace(logits, bitmask, indices=None):
    """Sets the logits of disallowed tokens to -inf, in place. ``logits``: ``[batch, V]``
    (or ``[V]``); ``bitmask``: int32 ``[batch, ceil(V / 32)]``, on any device;
    ``indices``: the logits rows the bitmask rows apply to (default: all, in order)."""
    squeeze = logits.dim() == 1
    rows = logits.unsqueeze(0) if squeeze else logits
    allowed = unpack_bitmask(torch.as_tensor(bitmask).to(rows.device), rows.shape[-1])
    if indices is None:
        rows.masked_fill_(~allowed[: rows.shape[0]], float("-inf"))
    else:
        idx = torch.as_tensor(indices, device=rows.device)
        rows[idx] = rows[idx].masked_fill(~allowed[: len(idx)], float("-inf"))
    return logits


def masked_logsumexp(logits, bitmask):
    """``log(sum(exp(logits)))`` over the tokens the bitmask allows, per row: one tensor
    operation on the logits' device (minus infinity for a row that allows nothing).
    ``logits``: ``[batch, V]`` (or ``[V]``); ``bitmask``: int32 ``[batch, ceil(V / 32)]``.

    The SMC weight increment of a step (docs/sampling.md) at temperature ``T`` is
    ``masked_logsumexp(logits / T, bitmask) - torch.logsumexp(logits / T, -1)``: the log of
    the probability mass the mask kept, which :func:`mask_log_mass` computes."""
    squeeze = logits.dim() == 1
    rows = logits.unsqueeze(0) if squeeze else logits
    allowed = unpack_bitmask(torch.as_tensor(bitmask).to(rows.device), rows.shape[-1])
    out = torch.logsumexp(rows.masked_fill(~allowed[: rows.shape[0]], float("-inf")), dim=-1)
    return out[0] if squeeze else out


def mask_log_mass(logits, bitmask, temperature=1.0):
    """The log of the probability the mask keeps at ``temperature``, per row: the weight
    increment of sequential Monte Carlo over masked particles (the model's probability of
    the token drawn over the masked distribution's)."""
    scaled = logits.float() / temperature
    return masked_logsumexp(scaled, bitmask) - torch.logsumexp(scaled, dim=-1)
