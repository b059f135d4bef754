from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# WaveNet (van den Oord et al. 2016) as the popular PyTorch ports write it: mu-law
# quantized audio as one-hot channels, a causal Conv1d, stacks of dilated causal convs with
# gated tanh * sigmoid units, residual and skip 1x1 convs, a softmax over 256 classes
def mu_law_encode(audio, quantization_channels=256):
    mu = quantization_channels - 1
    safe_audio_abs = torch.clamp(torch.abs(audio), max=1.0)
    magnitude = torch.log1p(mu * safe_audio_abs) / math.log1p(mu)
    signal = torch.sign(audio) * magnitude
    return ((signal + 1) / 2 * mu + 0.5).long()
def mu_law_decode(output, quantization_channels=256):
    mu = quantization_channels - 1
    signal = 2 * (output.float() / mu) - 1
    magnitude = (1 / mu) * ((1 + mu) ** torch.abs(signal) - 1)
    return torch.sign(signal) * magnitude
class CausalConv1d(nn.Conv1d):
    def __init__(self, in_channels, out_channels, kernel_size, dilation=1, **kwargs):
        super().__init__(in_channels, out_channels, kernel_size, padding=(kernel_size - 1) * dilation,
                         dilation=dilation, **kwargs)
        self.__padding = (kernel_size - 1) * dilation
    def forward(self, input):
        result = super(CausalConv1d, self).forward(input)
        if self.__padding != 0:
            return result[:, :, :-self.__padding]
        return result
class ResidualBlock(nn.Module):
    def __init__(self, res_channels, skip_channels, dilation):
        super().__init__()
        self.dilated = CausalConv1d(res_channels, 2 * res_channels, kernel_size=2, dilation=dilation)
        self.conv_res = nn.Conv1d(res_channels, res_channels, 1)
        self.conv_skip = nn.Conv1d(res_channels, skip_channels, 1)
    def forward(self, x, skip_size):
        output = self.dilated(x)
        filt, gate = output.chunk(2, dim=1)
        gated = torch.tanh(filt) * torch.sigmoid(gate)
        output = self.conv_res(gated)
        input_cut = x[:, :, -output.size(2):]
        output += input_cut
        skip = self.conv_skip(gated)
        skip = skip[:, :, -skip_size:]
        return output, skip
class WaveNet(nn.Module):
    def __init__(self, layer_size=4, stack_size=2, in_channels=256, res_channels=16, skip_channels=32):
        super().__init__()
        self.receptive_fields = int(np.sum([2 ** i for i in range(layer_size)] * stack_size))
        self.causal = CausalConv1d(in_channels, res_channels, kernel_size=2)
        self.res_stack = nn.ModuleList([ResidualBlock(res_channels, skip_channels, 2 ** l)
                                        for s in range(stack_size) for l in range(layer_size)])
        self.densnet = nn.Sequential(nn.ReLU(), nn.Conv1d(skip_channels, skip_channels, 1), nn.ReLU(),
                                     nn.Conv1d(skip_channels, in_channels, 1))
    def calc_output_size(self, x):
        return int(x.size(2)) - self.receptive_fields
    def forward(self, x):
        output = x.transpose(1, 2)
        output_size = self.calc_output_size(output)
        output = self.causal(output)
        skip_connections = []
        for block in self.res_stack:
            output, skip = block(output, output_size)
            skip_connections.append(skip)
        output = torch.sum(torch.stack(skip_connections), dim=0)
        output = self.densnet(output)
        return output.transpose(1, 2).contiguous()
model = WaveNet(); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
r = np.random.default_rng(0)
LOSSES = []
t = np.arange(80, dtype=np.float32) / 80
for step in range(4):
    freq = r.uniform(2, 6, (3, 1)).astype(np.float32)
    audio = torch.from_numpy(0.8 * np.sin(2 * np.pi * freq * t) + 0.05 * r.standard_normal((3, 80)).astype(np.float32))
    quantized = mu_law_encode(audio)
    inputs = F.one_hot(quantized, 256).float()
    logits = net(inputs)
    target = quantized[:, model.receptive_fields:]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 256), target[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_value_(model.parameters(), 0.5)
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    pred = net(inputs).argmax(-1)
    LOSSES += [mu_law_decode(pred).abs().mean().item(), (mu_law_decode(quantized) - audio).abs().max().item()]
