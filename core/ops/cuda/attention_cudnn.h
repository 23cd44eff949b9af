// Causal self-attention by cuDNN's fused (flash) attention, through its graph API (the cuDNN
// frontend's C++ headers, included by the .cpp only): the formulas of core/ops/attention.h
// over Alloy's own layouts, without copies. q, k and v are strided [B, H, T, D] views of the
// fused qkv [B, T, 3C]; y is [B, T, C]; lse is cuDNN's softmax statistics, f32 [B, H, T] (the
// log-sum-exp of the scaled scores, the quantity Alloy's kernels keep, so either backward can
// read either forward's); dq, dk and dv are written straight into dqkv's columns. Causal mask
// (a query sees the keys at and before it), scale 1/sqrt(D), fp32 softmax and accumulation,
// f16 or bf16 data. The backward asks for cuDNN's deterministic algorithm, so that two runs
// give the same bits. No dropout: cuDNN's random numbers are not Alloy's masks.
//
// Each (device, dtype, shape, pass) gets one graph with its execution plan, built on first use
// and kept for the process; a graph cuDNN refuses is remembered with cuDNN's reason. Building
// cannot happen inside a CUDA-graph capture (it is an error there): the eager warm-up steps
// build every graph a captured step runs. The workspace comes from the caching allocator.
#pragma once

#include <string>

#include "core/device.h"
#include "core/ops/attention.h"

namespace alloy::cuda {

// Why cuDNN cannot run this attention on `device` ("" when it can): its forward or its
// deterministic backward. Builds and keeps both graphs, so that a forward and the backward
// after it always run the same library.
std::string cudnn_attention_unsupported(Device device, DType dtype, const AttentionGeometry& g);

// As core/ops/cuda/attention.h's kernels without dropout, on the device's stream. The forward
// always writes lse: one forward graph, whose y a recomputed forward (which keeps lse) repeats
// bit for bit. A shape cuDNN cannot run throws, naming the pass, the shape and cuDNN's reason.
void cudnn_attention_forward(Device device, const void* qkv, DType dtype,
                             const AttentionGeometry& g, void* y, float* lse);
void cudnn_attention_backward(Device device, const void* dy, const void* qkv, const void* y,
                              const float* lse, DType dtype, const AttentionGeometry& g,
                              void* dqkv);

}  // namespace alloy::cuda
