# cudice: reference=../../../examples/relu.py
# Several independent compile errors, one per marked line (`// ERR`), used to compare the fast
# clangd diagnostics with the full nvcc/g++ build. Do not reformat: tests read the markers.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = (
    "#include <torch/extension.h>\n"
    "__global__ void k1(const float* x, float* out, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = x[i] * scale;  // ERR undeclared\n"
    "}\n"
)

more_src = """
__global__ void k2(float* out, int n) {
    float3 v = make_float3(1.0f, 2.0f, 3.0f);
    out[0] = v.w;  // ERR no member
}

__device__ float helper(float a) { return a * 2.0f; }

__global__ void k3(float* out) {
    out[0] = helpr(1.0f);  // ERR undeclared function
    int* p = out;  // ERR pointer type
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    k1<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

cpp_src = "torch::Tensr relu_cuda(torch::Tensor x);  // ERR cpp unknown type"

mod = load_inline(
    name="broken_multi",
    cpp_sources=cpp_src,
    cuda_sources=[cuda_src, more_src],
    functions=["relu_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return mod.relu_cuda(x)
