from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Slot Attention (Locatello et al.) object discovery as its PyTorch ports write it: a CNN
# encoder with a soft position embedding (a linspace/meshgrid grid as a buffer), slots
# drawn around learned mu/log-sigma (the noise given, as torch's own generator cannot be
# shared), attention normalized over the slots then over the inputs, a GRUCell update
# applied to the slots flattened and a residual MLP in a Python loop of iterations; a
# spatial broadcast decoder, the slots' RGB reconstructions composited by a softmax over
# the slots' alpha masks (split by torch.split); warmup then exponential decay by LambdaLR,
# clip_grad_norm_, compiled whole (the encoder's output normalized by F.layer_norm: an
# nn.LayerNorm made in the forward breaks torch.compile's graph)
class SlotAttention(nn.Module):
    def __init__(self, num_slots, dim, iters=3, eps=1e-8, hidden_dim=64):
        super().__init__()
        self.num_slots, self.iters, self.eps, self.scale = num_slots, iters, eps, dim ** -0.5
        self.slots_mu = nn.Parameter(torch.randn(1, 1, dim))
        self.slots_logsigma = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.xavier_uniform_(self.slots_logsigma)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.gru = nn.GRUCell(dim, dim)
        hidden_dim = max(dim, hidden_dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden_dim), nn.ReLU(inplace=True), nn.Linear(hidden_dim, dim))
        self.norm_input = nn.LayerNorm(dim)
        self.norm_slots = nn.LayerNorm(dim)
        self.norm_pre_ff = nn.LayerNorm(dim)
    def forward(self, inputs, noise):
        b, n, d = inputs.shape
        mu = self.slots_mu.expand(b, self.num_slots, -1)
        sigma = self.slots_logsigma.exp().expand(b, self.num_slots, -1)
        slots = mu + sigma * noise
        inputs = self.norm_input(inputs)
        k, v = self.to_k(inputs), self.to_v(inputs)
        for _ in range(self.iters):
            slots_prev = slots
            slots = self.norm_slots(slots)
            q = self.to_q(slots)
            dots = torch.einsum('bid,bjd->bij', q, k) * self.scale
            attn = dots.softmax(dim=1) + self.eps
            attn = attn / attn.sum(dim=-1, keepdim=True)
            updates = torch.einsum('bjd,bij->bid', v, attn)
            slots = self.gru(updates.reshape(-1, d), slots_prev.reshape(-1, d))
            slots = slots.reshape(b, -1, d)
            slots = slots + self.mlp(self.norm_pre_ff(slots))
        return slots
def build_grid(resolution):
    ranges = [np.linspace(0., 1., num=res) for res in resolution]
    grid = np.meshgrid(*ranges, sparse=False, indexing="ij")
    grid = np.stack(grid, axis=-1)
    grid = np.reshape(grid, [resolution[0], resolution[1], -1])
    grid = np.expand_dims(grid, axis=0).astype(np.float32)
    return torch.from_numpy(np.concatenate([grid, 1.0 - grid], axis=-1))
class SoftPositionEmbed(nn.Module):
    def __init__(self, hidden_size, resolution):
        super().__init__()
        self.embedding = nn.Linear(4, hidden_size, bias=True)
        self.register_buffer("grid", build_grid(resolution))
    def forward(self, inputs):
        return inputs + self.embedding(self.grid)
class Encoder(nn.Module):
    def __init__(self, resolution, hid_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, hid_dim, 5, padding=2)
        self.conv2 = nn.Conv2d(hid_dim, hid_dim, 5, padding=2)
        self.conv3 = nn.Conv2d(hid_dim, hid_dim, 5, padding=2)
        self.encoder_pos = SoftPositionEmbed(hid_dim, resolution)
    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        x = x.permute(0, 2, 3, 1)
        x = self.encoder_pos(x)
        return torch.flatten(x, 1, 2)
class Decoder(nn.Module):
    def __init__(self, hid_dim, resolution):
        super().__init__()
        self.conv1 = nn.ConvTranspose2d(hid_dim, hid_dim, 5, stride=(2, 2), padding=2, output_padding=1)
        self.conv2 = nn.ConvTranspose2d(hid_dim, hid_dim, 5, stride=(1, 1), padding=2)
        self.conv3 = nn.ConvTranspose2d(hid_dim, 4, 3, stride=(1, 1), padding=1)
        self.decoder_initial_size = (resolution[0] // 2, resolution[1] // 2)
        self.decoder_pos = SoftPositionEmbed(hid_dim, self.decoder_initial_size)
        self.resolution = resolution
    def forward(self, x):
        x = self.decoder_pos(x)
        x = x.permute(0, 3, 1, 2)
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.conv3(x)
        return x.permute(0, 2, 3, 1)
class SlotAttentionAutoEncoder(nn.Module):
    def __init__(self, resolution, num_slots, num_iterations, hid_dim):
        super().__init__()
        self.hid_dim, self.resolution, self.num_slots = hid_dim, resolution, num_slots
        self.encoder_cnn = Encoder(self.resolution, self.hid_dim)
        self.decoder_cnn = Decoder(self.hid_dim, self.resolution)
        self.fc1 = nn.Linear(hid_dim, hid_dim)
        self.fc2 = nn.Linear(hid_dim, hid_dim)
        self.slot_attention = SlotAttention(num_slots=self.num_slots, dim=hid_dim, iters=num_iterations, hidden_dim=64)
    def forward(self, image, noise):
        x = self.encoder_cnn(image)
        x = F.layer_norm(x, x.shape[1:])
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        slots = self.slot_attention(x, noise)
        # spatial broadcast
        slots = slots.reshape((-1, slots.shape[-1])).unsqueeze(1).unsqueeze(2)
        slots = slots.repeat((1, self.decoder_cnn.decoder_initial_size[0], self.decoder_cnn.decoder_initial_size[1], 1))
        x = self.decoder_cnn(slots)
        recons, masks = x.reshape(image.shape[0], -1, x.shape[1], x.shape[2], x.shape[3]).split([3, 1], dim=-1)
        masks = nn.Softmax(dim=1)(masks)
        recon_combined = torch.sum(recons * masks, dim=1)
        recon_combined = recon_combined.permute(0, 3, 1, 2)
        return recon_combined, recons, masks, slots
def make_scene(rng, res):
    """Two or three coloured discs and squares on a dark background."""
    img = np.full((3, res, res), 0.1, np.float32)
    yy, xx = np.mgrid[:res, :res]
    for _ in range(rng.integers(2, 4)):
        cy, cx, r = rng.uniform(3, res - 3, 2).tolist() + [rng.uniform(2, 4)]
        m = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r if rng.random() < 0.5 else (abs(yy - cy) < r) & (abs(xx - cx) < r)
        img[:, m] = rng.uniform(0.3, 1.0, (3, 1))
    return img * 2 - 1
rng = np.random.default_rng(0)
resolution, num_slots, hid_dim, batch_size = (16, 16), 4, 32, 8
images = torch.from_numpy(np.stack([make_scene(rng, resolution[0]) for _ in range(32)]))
model = SlotAttentionAutoEncoder(resolution, num_slots, 3, hid_dim); sync(model)
net = comp(model)
criterion = nn.MSELoss()
params = [{'params': model.parameters()}]
optimizer = torch.optim.Adam(params, lr=4e-4)
warmup_steps, decay_rate, decay_steps = 4, 0.5, 20
def lr_lambda(i):
    factor = i / warmup_steps if i < warmup_steps else 1
    return factor * decay_rate ** (i / decay_steps)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
LOSSES = []
for epoch in range(2):
    model.train()
    total_loss = 0
    for i in range(0, len(images), batch_size):
        image = images[rng.permutation(len(images))[:batch_size]]
        noise = torch.from_numpy(rng.standard_normal((batch_size, num_slots, hid_dim)).astype(np.float32))
        recon_combined, recons, masks, slots = net(image, noise)
        loss = criterion(recon_combined, image)
        total_loss += loss.item()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        LOSSES.append(loss.item())
    LOSSES.append(total_loss / (len(images) // batch_size))
model.eval()
with torch.no_grad():
    noise = torch.from_numpy(rng.standard_normal((4, num_slots, hid_dim)).astype(np.float32))
    recon_combined, recons, masks, slots = net(images[:4], noise)
    LOSSES += [criterion(recon_combined, images[:4]).item(), masks.max(dim=1)[0].mean().item()]
