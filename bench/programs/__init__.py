"""Public-style PyTorch programs, run by ``import torch`` and by tracejit swapped in for it.

Each module here is a small training program written as pytorch/examples, the PyTorch
tutorials and popular repositories write theirs, against ``torch`` only: a ``Program``
class whose ``__init__(compile)`` builds the model, data and optimizer (``compile`` is
``torch.compile`` or the identity; it wraps what a user would compile) and whose
``step()`` runs one training step and returns its loss as a float. Under tracejit the
runner swaps the module (torchswap.py), so the same file runs on both.

``python -m bench.programs`` (``__main__.py``) times every program in PyTorch eager,
tracejit eager, torch.compile and tracejit.compile, one fresh process per measurement
(``worker.py``). This package's ``__init__`` imports no framework.
"""
from __future__ import annotations

# name -> what it is (the runner's order)
PROGRAMS = {
    "dcgan": "DCGAN, 32x32, batch 32: ConvTranspose2d/Conv2d + BatchNorm, BCELoss, two Adams",
    "gcn": "two-layer GCN on a Cora-sized graph: index_select / index_add_ message passing",
    "charmlp": "makemore-style character MLP: embedding by indexing, tanh, SGD by hand",
    "seq2seq": "GRU encoder-decoder with Bahdanau attention, 10 teacher-forced steps",
    "lstmcell": "two LSTMCells over 100 steps in float64 (time_sequence_prediction)",
    "gat": "two-layer GAT, 8 heads: edge softmax by scatter_reduce / scatter_add",
    "resnet": "ResNet-18 shape at quarter width, 32x32, batch 32, SGD momentum",
    "superres": "sub-pixel super-resolution CNN with PixelShuffle(3), batch 8",
    "vae": "MLP VAE, 784-400-20, BCE + KL, batch 128",
    "policy": "REINFORCE on a cart-pole: 50 one-state policy calls and Categorical per step",
    "gpt": "nanoGPT, 4 layers, width 128, context 64: scaled_dot_product_attention, AdamW",
    "vit": "ViT on 32x32, patch 4: nn.TransformerEncoder of 4 pre-norm layers, AdamW",
    "unet": "U-Net, widths 8-128, 64x64: ConvTranspose2d, pad and cat skips, Dice loss",
    "textcls": "EmbeddingBag text classifier: DataLoader collate per step, SGD, clip_grad_norm_",
    "moe": "Mixtral-style top-2 mixture of 8 experts: topk, where, index_add_ routing",
    "wordlm": "word LM: 2-layer nn.LSTM, tied decoder, bptt 35, detach, clip_grad_norm_, SGD by hand",
    "mobilenet": "MobileNetV2 at width 0.5 with SE: depthwise convs, ReLU6/Hardswish in place",
    "ctc": "DeepSpeech2-style: Conv2d/Conv1d front end, 3 bidirectional GRUs, CTCLoss",
    "crf": "BiLSTM-CRF tagger: forward algorithm by logsumexp in a loop over 30 positions",
    "pinn": "Burgers' PINN: u_t, u_x, u_xx by autograd.grad(create_graph=True), double backward",
    "maml": "second-order MAML, 25 sinusoid tasks: functional_call, autograd.grad(create_graph)",
    "nerf": "NeRF, 256 rays: positional encoding, cumprod transmittance, searchsorted resampling",
    "node": "neural ODE: RK4 by a Python loop, 40 calls of an MLP vector field a step, RMSprop",
    "detect": "one-stage detector: anchors, box IoU, focal + smooth L1 loss on boolean-masked anchors",
    "dgcnn": "DGCNN point cloud: knn by cdist + topk, neighbour gather by flat index, 1x1 convs, max",
    "mamba": "mamba-minimal: selective scan as a Python loop of einsums over 32 steps, depthwise Conv1d",
    "wavenet": "WaveNet: one-hot mu-law input, 12 gated dilated causal Conv1d blocks, 256-way softmax",
    "vqvae": "VQ-VAE: argmin codes, EMA codebook, straight-through; encoder and decoder compiled",
    "caption": "image captioner: CNN memory, 3 batch-first pre-norm TransformerDecoder layers, masks",
    "kvgen": "GPT-2 sampling: 32 tokens one at a time from a growing key/value cache, no_grad",
    "gin": "GIN on batches of 32 graphs of 10-40 nodes: index_add_, scatter_reduce, dynamic sizes",
    "stn": "spatial transformer tutorial: affine_grid + grid_sample warp before a LeNet, batch 64",
    "moco": "MoCo v2: momentum key encoder by .data inside the forward, a queue, compiled whole",
    "sac": "Soft Actor-Critic: tanh-squashed Normal, twin Q, Polyak targets, 5 compiled MLPs",
    "tft": "Temporal Fusion Transformer: GRNs, variable selection, LSTM encoder-decoder, quantiles",
    "dit": "DiT: adaLN-Zero blocks (MultiheadAttention, modulated LayerNorm), 256 tokens, width 96",
    "textcnn": "Kim's sentence CNN: Conv2d over 3/4/5-word windows, max-over-time pooling, Adam",
    "kws": "M5 keyword net on 1 s of 8 kHz audio beside torch.stft log-spectrogram features",
    "ntm": "Neural Turing Machine copy task: 11-21 compiled steps of content addressing, conv1d shifts",
    "bbb": "Bayes by Backprop, 784-400-400-10: weights sampled each forward, scale-mixture prior, 2 samples",
    "sage": "GraphSAGE on sampled 2-hop neighbourhoods of 128 seeds: index_add_/scatter_reduce means, dynamic",
    "convnext": "ConvNeXt at CIFAR size: depthwise 7x7, LayerNorm by permute, layer scale, channels_last",
    "conformer": "Conformer CTC, 4 layers of width 144: macaron FFNs, MHSA, GLU conv module, loss inside",
    "stylegan": "StyleGAN2 at 32x32: modulated convs by groups=batch, equalized lr, R1 by autograd.grad",
    "raft": "RAFT flow step, 128x128 pairs: matmul correlation pyramid, grid_sample lookups, 6 ConvGRU iterations",
    "densenet": "DenseNet-BC, 3 blocks of 6, growth 12: cat of every earlier map, checkpointed bottlenecks",
    "hifigan": "HiFi-GAN: weight-normed ConvTranspose1d generator, dilated ResBlocks, 5-period MPD, STFT L1",
    "txl": "Transformer-XL, 3 layers of 128: detached memories, rel_shift attention, adaptive softmax",
    "tabnet": "TabNet, 4 steps: sparsemax autograd.Function (sort, cumsum), ghost BatchNorm, GLU blocks",
    "dlrm": "DLRM: 8 sparse EmbeddingBags with offsets of changing length, triu_indices dot interactions",
    "yolo": "YOLOv5-lite, 128x128 channels_last: Focus slices, C3, SPPF, ratio-mask targets, CIoU",
    "r2plus1d": "R(2+1)D video clips 8x56x56: (1,3,3)+(3,1,1) Conv3d, BatchNorm3d, MaxPool3d",
    "convlstm": "ConvLSTM encoder-forecaster: conv gates on cat([x, h]), loops over 10 frames of 64x64",
    "schnet": "SchNet on 16 molecules: cdist radius graph, index_add_ filter convs, forces by create_graph",
    "rotate": "RotatE: view_as_complex entities, polar rotations, |h*r - t| scores, self-adversarial negatives",
    "informer": "Informer: ProbSparse attention (sampled keys, topk queries, scatter into context), distilling",
    "dino": "DINO: ViT student and EMA teacher, multi-crop grouped by unique_consecutive, centering",
    "hashsdf": "hash-grid SDF: 8 levels of int64 XOR-hashed Embeddings, trilinear, eikonal by create_graph",
    "dnc": "Differentiable Neural Computer: sorted-usage allocation by cumprod/scatter, links, 13 steps",
    "convtasnet": "Conv-TasNet, 1 s at 8 kHz: depthwise dilated Conv1d, PReLU, global LayerNorm, PIT SI-SNR",
    "ddsp": "DDSP: harmonic synth (cumsum phase, sin), FFT-convolved noise, 4-scale torch.stft loss",
    "rnnt": "RNN-Transducer: broadcast joint network, loss by in-place writes over a 20x7 lattice",
    "specdec": "speculative decoding: 1-layer draft, 4-layer target GPT, cropped growing caches, 32 tokens",
    "beam": "beam search, 16 sentences x beam 5: GRU seq2seq, topk over beam*vocab, index_select reorders",
    "kan": "KAN 64-128-64-10: Cox-de Boor B-spline bases in a Python loop, einsum, L1+entropy reg",
    "nca": "growing neural CA, 32 steps of a compiled step: grouped Sobel conv, 1x1 convs, alive masks",
    "tsp": "Kool's TSP attention model: Transformer encoder, 20 masked decoding steps, REINFORCE",
    "dcnv2": "hand-written deformable conv v2: grid_sample per kernel tap, einsum over taps, segmentation",
    "din": "Deep Interest Network: Dice activations, attention over 50 padded behaviours, batch 256",
    "mod": "Mixture-of-Depths GPT: topk(sorted=False) token routing, sort, gather, scatter_add",
    "detr": "DETR: conv backbone, nn.Transformer 3+3 layers, 16 queries, Hungarian matching in numpy",
    "nsf": "neural spline flow, 4 couplings: searchsorted bins, gathers, boolean-masked tails, batch 256",
    "performer": "Performer LM, 256 tokens: FAVOR+ features, cumsum causal linear attention, unfold local head",
    "autoformer": "Autoformer: moving-average decomposition, rfft/irfft auto-correlation, topk delays by gather",
    "pointnet2": "PointNet++ SSG, 16 x 512 points: farthest point sampling loop, ball query by sort, gathers",
    "slotattn": "Slot Attention autoencoder, 32x32: 5 slots, 3 GRUCell iterations, spatial broadcast decoder",
    "centernet": "CenterNet, 96x96, batch 8: stride-4 heads, focal loss on a sigmoid_ heatmap, gathered RegL1",
    "dimenet": "DimeNet, 16 molecules of 8-20 atoms: radius graph, triplets, acos angles, bilinear messages",
    "hyena": "Hyena LM, 128 tokens: implicit long-conv filters applied by rfft/irfft at 2L, gating",
    "deepar": "DeepAR: lagged count windows, 2-layer LSTM over 72 steps, NegativeBinomial likelihood",
    "esrgan": "ESRGAN, 24x24 to 96x96: RRDB dense blocks (cat of earlier outputs), relativistic GAN, G and D steps",
    "ptrans": "Point Transformer, 8 x 256 points: kNN by cdist + topk, gathered vector attention, FPS loop",
    "whisper": "Whisper-style ASR: stft log-mel, conv stem, 2+2 blocks of width 64, cross-attention",
    "longformer": "Longformer, 256 tokens: sliding-window attention by unfold bands, global tokens",
    "enet": "ENet, 64x64, batch 8: MaxUnpool2d by pooling indices, PReLU, dilated/asymmetric convs, Lovasz",
    "iqn": "IQN on 64 torch cart-poles: cosine quantile embedding, 32x32 quantile Huber pairs, target net",
    "reformer": "Reformer LM, 256 tokens: LSH buckets by argmax, argsort chunks, gather unsort, reversible blocks",
    "deberta": "DeBERTa-v2, 128 tokens: log-bucketed relative positions, c2p/p2c scores by gather",
    "sam": "SAM on a WideResNet-16-2, 32x32, batch 32: two passes a step, BatchNorm momentum toggled",
    "lnn": "Lagrangian NN, batch 64: vmap of torch.func hessian and nested jacrev, pinv, Adam",
    "demucs": "Demucs v2, 4 stereo sources, 1 s at 8 kHz: Conv1d/GLU U-Net, BiLSTM bottleneck, trimmed skips",
    "superglue": "SuperGlue, 128 x 112 keypoints: self/cross einsum attention, 20 log-Sinkhorn iterations",
}

# program -> {system: why it cannot run the program}: not run, shown as "unsupported"
UNSUPPORTED = {
    "pinn": {"torch_compile": "torch.compile has no double backward (the loss differentiates "
                              "autograd.grad's create_graph results)"},
    "maml": {"torch_compile": "torch.compile has no double backward (the meta-gradient "
                              "differentiates the inner step's gradients)"},
    "moco": {"torch_compile": "torch.compile's backward fails: the queue, read through "
                              "clone().detach(), is \"modified by an inplace operation\" (the enqueue)"},
    "stylegan": {"torch_compile": "torch.compile has no double backward (the R1 penalty differentiates "
                                  "autograd.grad's create_graph result through the discriminator)"},
    "schnet": {"torch_compile": "torch.compile has no double backward (the force loss differentiates "
                                "autograd.grad's create_graph result)"},
    "hashsdf": {"torch_compile": "torch.compile has no double backward (the eikonal loss differentiates "
                                 "autograd.grad's create_graph result)"},
    "lnn": {"torch_compile": "torch.compile's backward through vmap of torch.func's hessian fails "
                             "(\"ZeroTensors are immutable\")"},
}

SYSTEMS = ("torch_eager", "tracejit_eager", "torch_compile", "tracejit_compiled")
