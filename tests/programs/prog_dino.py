from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# DINO as its repository writes it: a tiny ViT (positional embeddings interpolated bicubically
# for the local crops' size), a MultiCropWrapper that groups the crops by resolution
# (cumsum of unique_consecutive's counts) and runs each group through the one backbone,
# DINOHead's weight-normed last layer with weight_g frozen, a teacher kept as an EMA of the
# student (param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)), the loss's center a
# buffer updated by an EMA of the teacher's outputs, the teacher's softmax sharpened by a
# warmed-up temperature, cross-entropy summed over every (teacher, student) crop pair but the
# same view, gradients clipped per parameter, the last layer frozen for the first iterations,
# and cosine lr / weight-decay / momentum schedules set per param group
class Attention(nn.Module):
    def __init__(self, dim, num_heads=2, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x), attn
class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))
    def forward(self, x, return_attention=False):
        y, attn = self.attn(self.norm1(x))
        if return_attention:
            return attn
        x = x + y
        return x + self.mlp(self.norm2(x))
class VisionTransformer(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32, depth=2, num_heads=2):
        super().__init__()
        self.patch_size = patch_size
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Identity()
        nn.init.trunc_normal_(self.pos_embed, std=.02)
        nn.init.trunc_normal_(self.cls_token, std=.02)
    def interpolate_pos_encoding(self, x, w, h):
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        class_pos_embed = self.pos_embed[:, 0]
        patch_pos_embed = self.pos_embed[:, 1:]
        dim = x.shape[-1]
        w0 = w // self.patch_size
        h0 = h // self.patch_size
        # we add a small number to avoid floating point error in the interpolation
        w0, h0 = w0 + 0.1, h0 + 0.1
        patch_pos_embed = nn.functional.interpolate(
            patch_pos_embed.reshape(1, int(math.sqrt(N)), int(math.sqrt(N)), dim).permute(0, 3, 1, 2),
            scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)), mode='bicubic')
        assert int(w0) == patch_pos_embed.shape[-2] and int(h0) == patch_pos_embed.shape[-1]
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1)
    def prepare_tokens(self, x):
        B, nc, w, h = x.shape
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        return x + self.interpolate_pos_encoding(x, w, h)
    def forward(self, x):
        x = self.prepare_tokens(x)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return x[:, 0]
class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, norm_last_layer=True, hidden_dim=48, bottleneck_dim=16):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, hidden_dim),
                                 nn.GELU(), nn.Linear(hidden_dim, bottleneck_dim))
        self.apply(self._init_weights)
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        if norm_last_layer:
            self.last_layer.weight_g.requires_grad = False
    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
    def forward(self, x):
        x = self.mlp(x)
        x = nn.functional.normalize(x, dim=-1, p=2)
        return self.last_layer(x)
class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super(MultiCropWrapper, self).__init__()
        backbone.fc, backbone.head = nn.Identity(), nn.Identity()
        self.backbone = backbone
        self.head = head
    def forward(self, x):
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0)
        start_idx, output = 0, torch.empty(0).to(x[0].device)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx: end_idx]))
            if isinstance(_out, tuple):
                _out = _out[0]
            output = torch.cat((output, _out))
            start_idx = end_idx
        return self.head(output)
class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs,
                 nepochs, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.ncrops = ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.teacher_temp_schedule = np.concatenate((
            np.linspace(warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs),
            np.ones(nepochs - warmup_teacher_temp_epochs) * teacher_temp))
    def forward(self, student_output, teacher_output, epoch):
        student_out = student_output / self.student_temp
        student_out = student_out.chunk(self.ncrops)
        temp = self.teacher_temp_schedule[epoch]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
        teacher_out = teacher_out.detach().chunk(2)
        total_loss = 0
        n_loss_terms = 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue   # we skip cases where student and teacher operate on the same view
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        self.update_center(teacher_output)
        return total_loss
    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True)
        batch_center = batch_center / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)
def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0, start_warmup_value=0):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)
    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = final_value + 0.5 * (base_value - final_value) * (1 + np.cos(np.pi * iters / len(iters)))
    schedule = np.concatenate((warmup_schedule, schedule))
    assert len(schedule) == epochs * niter_per_ep
    return schedule
def get_params_groups(model):
    regularized, not_regularized = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if name.endswith(".bias") or len(param.shape) == 1:   # we do not regularize biases nor Norm parameters
            not_regularized.append(param)
        else:
            regularized.append(param)
    return [{'params': regularized}, {'params': not_regularized, 'weight_decay': 0.}]
def clip_gradients(model, clip):
    norms = []
    for name, p in model.named_parameters():
        if p.grad is not None:
            param_norm = p.grad.data.norm(2)
            norms.append(param_norm.item())
            clip_coef = clip / (param_norm + 1e-6)
            if clip_coef < 1:
                p.grad.data.mul_(clip_coef)
    return norms
def cancel_gradients_last_layer(epoch, model, freeze_last_layer):
    if epoch >= freeze_last_layer:
        return
    for n, p in model.named_parameters():
        if "last_layer" in n:
            p.grad = None
out_dim, local_crops_number, epochs, niter = 24, 4, 3, 2
student = MultiCropWrapper(VisionTransformer(), DINOHead(32, out_dim))
teacher = MultiCropWrapper(VisionTransformer(), DINOHead(32, out_dim))
sync(student)
teacher.load_state_dict(student.state_dict())   # teacher and student start with the same weights
for p in teacher.parameters():
    p.requires_grad = False
student_c, teacher_c = comp(student), comp(teacher)
dino_loss = DINOLoss(out_dim, local_crops_number + 2, 0.04, 0.07, 2, epochs)
optimizer = torch.optim.AdamW(get_params_groups(student))
lr_schedule = cosine_scheduler(5e-3, 1e-5, epochs, niter, warmup_epochs=1)
wd_schedule = cosine_scheduler(0.04, 0.4, epochs, niter)
momentum_schedule = cosine_scheduler(0.9, 1, epochs, niter)
r = np.random.default_rng(0)
def crops(images, size):   # a random resized crop by slicing and interpolation, a random flip
    n, _, H, W = images.shape
    s = int(r.integers(size // 2 + 4, H + 1)); i, j = r.integers(0, H - s + 1, size=2)
    c = F.interpolate(images[:, :, i:i + s, j:j + s], size=(size, size), mode='bilinear', align_corners=False)
    return torch.flip(c, dims=[3]) if r.random() < 0.5 else c
LOSSES = []
for epoch in range(epochs):
    for it_ in range(niter):
        it = niter * epoch + it_   # global training iteration
        for i, param_group in enumerate(optimizer.param_groups):
            param_group["lr"] = lr_schedule[it]
            if i == 0:   # only the first group is regularized
                param_group["weight_decay"] = wd_schedule[it]
        images = torch.from_numpy(r.random((6, 3, 20, 20)).astype(np.float32))
        views = [crops(images, 16) for _ in range(2)] + [crops(images, 8) for _ in range(local_crops_number)]
        teacher_output = teacher_c(views[:2])   # only the 2 global views pass through the teacher
        student_output = student_c(views)
        loss = dino_loss(student_output, teacher_output, epoch)
        optimizer.zero_grad()
        loss.backward()
        norms = clip_gradients(student, 3.0)
        cancel_gradients_last_layer(epoch, student, 1)
        optimizer.step()
        with torch.no_grad():   # EMA update for the teacher
            m = momentum_schedule[it]
            for param_q, param_k in zip(student.parameters(), teacher.parameters()):
                param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
        LOSSES.append(loss.item()); LOSSES.append(sum(norms))
LOSSES += [dino_loss.center.sum().item(), teacher.head.last_layer.weight_v.sum().item(),
           student.backbone.pos_embed.sum().item()]
