"""The decode path of sdpa_gqa: two matmuls over the grouped heads give SDPA's result over repeated heads."""

import torch

from components.model.attention import grouped_decode, sdpa_gqa_forward


def _inputs(dtype=torch.float32, rows=5, heads=6, kv=2, width=9, dim=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, heads, 1, dim, generator=g).to(dtype)
    k, v = (torch.randn(rows, kv, width, dim, generator=g).to(dtype) for _ in range(2))
    lengths = torch.tensor([9, 1, 4, 7, 0])  # the last row has no visible column
    mask = (torch.arange(width)[None, :] < lengths[:, None])[:, None, None, :]
    return q, k, v, mask


def _reference(q, k, v, mask):
    rep = q.shape[1] // k.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                           attn_mask=mask)  # fmt: skip
    return out.transpose(1, 2)


def test_grouped_decode_equals_sdpa_over_repeated_heads():
    q, k, v, mask = _inputs()
    out = grouped_decode(q, k, v, mask, None)
    assert out.shape == (5, 1, 6, 8)
    assert torch.allclose(out[:4], _reference(q, k, v, mask)[:4], atol=1e-6)
    assert torch.isfinite(out[4]).all()  # every column masked: no NaN
    unmasked = grouped_decode(q, k, v, None, 0.3)
    assert torch.allclose(unmasked, _reference(q * 0.3 / 8**-0.5, k, v, None), atol=1e-6)


def test_sdpa_gqa_takes_the_decode_path_only_for_one_query_token():
    q, k, v, mask = _inputs()
    out, _ = sdpa_gqa_forward(None, q, k, v, mask)
    assert torch.equal(out, grouped_decode(q, k, v, mask, None))
    q2 = torch.cat([q, q], dim=2)
    mask2 = torch.ones(5, 1, 2, 9, dtype=torch.bool)
    out2, _ = sdpa_gqa_forward(None, q2, k, v, mask2)
    ref = _reference(q2, k, v, mask2)
    assert torch.allclose(out2, ref, atol=1e-6)
