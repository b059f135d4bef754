"""Public-style PyTorch training programs (GPT, ViT, U-Net, WGAN-GP, DDPM, DQN, PPO,
RealNVP with a mixture density head, TCN with weight norm, mixture of experts, style
transfer with LBFGS, bidirectional packed LSTM, knowledge distillation with a contrastive
term, text classification with EmbeddingBag, a tabular loader, a Siamese network, a
module mix with spectral norm and checkpointing, a word-level LSTM language model with
tied weights, a MobileNetV2/EfficientNet-style CNN with squeeze-and-excitation, a Conv1d +
bidirectional GRU speech model under CTC loss, nn.Transformer translation with greedy
decoding, a BiLSTM-CRF tagger, SimCLR's InfoNCE, a physics-informed network (second
derivatives by create_graph), second-order MAML by functional_call, a masked autoencoder,
NeRF volume rendering with hierarchical sampling, BPR/NCF recommenders with sparse
embeddings and EmbeddingBag, a packed GRU classifier under OneCycleLR and
ReduceLROnPlateau, BERT fine-tuning with checkpointed layers and gradient accumulation, a
neural ODE by RK4, a one-stage detector's focal loss on boolean-masked anchors, DGCNN on
point clouds, Swin's shifted-window attention, a mixture density network, a VQ-VAE with an
EMA codebook, WaveNet, CLIP, Mamba's selective scan, PixelCNN, a mixup/cutmix recipe
with a custom collate_fn and a weight EMA, GPT-2 sampling from a key/value cache, a
Llama-style decoder generating from left-padded prompts with a tuple cache,
torch.func's per-sample gradients and vmapped ensembles, hooks with checkpointing and a
bit-identical resume from torch.save, SNGAN with spectral norm, image captioning with a
batch-first norm-first TransformerDecoder, a packed LSTM autoencoder, and EfficientNet's
MBConv with stochastic depth under SequentialLR with two weight EMAs, and a Fourier
neural operator trained by Adam on complex weights, a spatial transformer network
(affine_grid, grid_sample) compiled with mode="reduce-overhead", exact Gaussian-process
regression by Cholesky in float64 compiled with fullgraph=True, the seq2seq tutorial's GRU
decoder with Bahdanau attention, and a GIN graph classifier whose batches of graphs
(index_add_, scatter_add_, scatter_reduce readouts) are compiled with dynamic=True, MoCo's
momentum encoder and queue compiled whole, and Spinning Up's Soft Actor-Critic with a
tanh-squashed Normal and Polyak-averaged twin Q targets, CapsNet's routing by agreement,
LoRA adapters as parametrizations merged at the end, hand-written quantization-aware
training (custom autograd.Functions, observer buffers, LSQ step sizes), a top-k sparse
autoencoder with unit-norm decoder rows, prototypical networks over episodes of varying
ways and shots, DiT's adaLN-Zero blocks sampled by DDIM with classifier-free
guidance, lottery-ticket pruning by torch.nn.utils.prune with rewinding, Glow (ActNorm's
data-dependent init, an LU-form invertible 1x1 conv), JEM's SGLD sampling from a replay
buffer, a categorical VAE under straight-through Gumbel-softmax with an annealed
temperature, Tokens-to-Token ViT (nn.Unfold soft splits, F.fold, SequentialLR), RWKV-4's
WKV recurrence with a save/load round trip, a Set Transformer over padded masked sets, and
a Temporal Fusion Transformer (GRNs, variable selection, LSTM encoder-decoder, quantile
loss), an M5 keyword net on STFT
features, Kim's text CNN (max-over-time pooling, Adadelta, a max-norm constraint), an LSTM
forecaster whose decoder flips a Python coin for teacher forcing under ReduceLROnPlateau,
custom parametrizations with buffers and
forward hooks, static and task-conditioned hypernetworks, and a decoder-only LM of
nn.MultiheadAttention with causal and padding masks sampling top-k, BYOL's EMA target
network, Bayes by Backprop's sampled weights under a scale-mixture prior, TD3's twin
critics with target policy smoothing and delayed actor updates, GraphSAGE on sampled
neighbourhoods, and a T5 encoder with relative position buckets under gradient
accumulation and LambdaLR warmup, a Neural Turing Machine's content-addressed memory on
the copy task, a sentence-embedding model under in-batch negatives, an ALiBi causal LM on chunks of
changing length, ConvNeXt blocks
(depthwise 7x7, channels-last LayerNorm by permute, layer scale, DropPath) on
channels_last inputs under a hand-set warmup-cosine AdamW, two MLP-Mixers (token mixing
by a kernel-1 Conv1d and by transposes, hooks keeping activations), StyleGAN2's modulated convolution (demodulation,
groups=batch, equalized lr, noise injection) with an R1 penalty, CycleGAN (ReflectionPad2d,
InstanceNorm2d, PatchGAN, LSGAN + L1 losses, an image pool), a Conformer under CTC
(log-mel by stft, relative-position attention by rel_shift, GLU/depthwise conv module)
and a Perceiver (Fourier features, latent cross-attention, tied layers), DenseNet-BC
(checkpointed bottlenecks), ShuffleNetV2's channel shuffle, DeepLabV3's ASPP, a RAFT
flow step (correlation pyramid, grid_sample lookups, ConvGRU, convex upsampling),
HiFi-GAN (weight-normed generator, multi-period discriminator, STFT L1) and SegFormer's
Mix Transformer, a YOLOv5-lite detector (Focus slicing, C3, SPPF, CIoU, ratio-mask target
assignment, grids cached in a list), R(2+1)D video clips (factored Conv3d, BatchNorm3d,
MaxPool3d), a ConvLSTM encoder-forecaster under scheduled sampling and HRNet's parallel
branches with soft-argmax keypoints, wav2vec 2.0 pre-training (Gumbel product quantizer,
masked spans, contrastive loss) and Tacotron 2 (location-sensitive attention stepped by
LSTMCells, packed encoder, postnet), BERT masked-LM pretraining (80/10/10 masking, a
decoder tied to the embeddings), RotatE and ComplEx on complex tensors with self-adversarial negatives,
SchNet's continuous-filter convolutions with forces by create_graph, a Decision
Transformer, Informer's ProbSparse attention with distilling, and timm's ModelEmaV3,
Mixup, NativeScaler and a mid-epoch resume; DINO's multi-crop self-distillation, SwAV and
Barlow Twins, PointNet's T-Nets, a hash-grid SDF under an eikonal loss, a Differentiable
Neural Computer, EGNN's rollout and xLSTM's mLSTM, Conv-TasNet under permutation-invariant SI-SNR,
DDSP's harmonic synthesizer under a multi-scale STFT loss, an RNN-Transducer's lattice loss,
SASRec's causal self-attention over padded item sequences, DCN-V2 and DeepFM on
weighted EmbeddingBags under two optimizers, skip-gram word2vec with SparseAdam and A2C with
GAE, speculative decoding between a draft and a target GPT with
cropped key/value caches, batched beam search over a GRU seq2seq, rectified flow with a
_foreach_ EMA and an Euler sampler, PatchTST (RevIN, unfold patches, norm-first encoder,
OneCycleLR), a KAN of B-spline layers with grid updates by lstsq, and RetNet's parallel and
recurrent retention, DETR's Hungarian-matched set loss over nn.Transformer, Mask R-CNN's
RoI heads on a RoIAlign written with grid_sample, a Graph Transformer on Laplacian
eigenvector encodings, IMPALA's V-trace from a lagging actor, neural spline flows
(searchsorted bins, masked tails), SIREN's gradient and Laplacian fits and Reptile's
state_dict interpolation, PointNet++'s farthest point sampling and ball query, Slot
Attention, VICReg under a hand-written LARS, DiffPool on dense padded graphs and ProdLDA's
topic VAE, CenterNet's heatmap focal loss and max_pool2d/topk decoding, PSPNet's pyramid
pooling, an attentive neural process, MuZero's unrolled training step and DimeNet's
triplet angles) run unchanged
with tracejit in place of torch and give PyTorch's losses from the same weights, eager
and compiled, the compiled ones in a bounded number of captures.

Each framework runs in its own process (``_runner.py``); the PyTorch run saves the
weights it drew and the tracejit runs load them by state_dict name."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = sorted(f for f in os.listdir(HERE) if f.startswith("prog_") and f.endswith(".py"))
# the compiled run (a cold kernel cache compiles every group: ~15 s a program on 2 cores):
# a Transformer, a weight-normed Conv1d network, a CNN of in-place activations, a
# network differentiated twice through its compiled forward, a point-cloud network
# (topk neighbours, a flat-index gather, max over neighbours), a VQ-VAE (argmin codes,
# EMA codebook, straight-through), WaveNet's gated dilated causal convs, CLIP's two
# towers (MultiheadAttention with a mask, EOT pooling by argmax), Mamba's selective scan
# (a Python loop over time of einsums), PixelCNN's masked convs (weights masked through
# .data, in-place ReLUs), a mixup/cutmix recipe under OneCycleLR with a weight EMA,
# GPT-2 generating token by token from a growing key/value cache, SNGAN (spectral norm's
# power iteration in the graph), a captioner's TransformerDecoder with masks and a
# Llama-style decoder whose attention mask and cache grow together (equal sizes guarded),
# a spatial transformer's warp, a Gaussian process's Cholesky marginal likelihood, a GRU
# decoder's Python loop of attention steps, message passing over dynamic node counts,
# MoCo (`.data =` momentum updates, an enqueue at a pointer read by int()) and SAC
# (Normal's argument checks in the graph), CapsNet (a routing loop), LoRA (parametrized
# weights), QAT (custom autograd.Functions, an observer's first-call branch on a buffer), a
# top-k SAE (topk/scatter, a buffer counting dead latents), prototypical networks
# (dynamic=True over episode sizes), DiT (a compiled bound method for guided sampling),
# pruning (forward pre-hooks that come and go), Glow, JEM (input gradients through the
# compiled energy), the Gumbel-softmax VAE (a numpy float64 temperature), T2T-ViT, RWKV
# (a loop over time), a Set Transformer (set sizes going dynamic) a TFT (two LSTMs),
# a keyword net, a text CNN's max-over-time
# pooling, parametrized weights, kernels a hypernetwork generates and a
# MultiheadAttention LM's generation, a neural ODE's vector field counting its calls, BYOL
# (a target network under no_grad in the forward) and Bayes by Backprop (log-probabilities set on the layers, a number in eval), TD3,
# GraphSAGE (node and edge counts of each sampled batch dynamic), a T5 encoder and an NTM
# (one step compiled, its state a nested tuple), a sentence encoder (dynamic=True, kwargs)
# and an ALiBi LM (a float attn_mask of slopes and a triu -inf mask, lengths dynamic),
# ConvNeXt on channels_last inputs, MLP-Mixers and
# StyleGAN2's grouped modulated convs under requires_grad toggles and R1, CycleGAN's four
# nets, a Conformer (rel_shift, padding masks) and a Perceiver's einsum attention, DenseNet's
# checkpointed bottlenecks, ShuffleNetV2, DeepLabV3's ASPP, RAFT's grid_sample iterations,
# HiFi-GAN (its weight norm removed between calls) and SegFormer (not wav2vec 2.0 or
# Tacotron 2: their forwards break the graph where torch.compile's do, negatives viewed by
# a mask's count against a fixed size and lengths read by .item()/.numpy()), complex embeddings
# differentiated through the graph (RotatE, ComplEx), SchNet's forces (create_graph
# through a dynamic=True capture), Informer's advanced-index scatter into a context, and
# FNO's spectral convolutions (rfft2, complex weights written into out_ft slices), DINO's
# multi-crop wrapper, SwAV's Sinkhorn and Barlow Twins' in-place diagonal, PointNet, a hash
# grid SDF's eikonal term (create_graph), a DNC's unrolled memory and EGNN (its mean divides
# by bincount(row, minlength=n), a data-dependent size broadcast against the node count),
# xLSTM's mLSTM (squeeze_ on the heads' views in its recurrent step), speculative decoding
# (tril(diagonal=L - T) over a growing, cropped cache), beam search (index_select of the
# beams' states), a rectified flow's Euler sampler, PatchTST, a KAN and RetNet's two forms;
# DETR and Mask R-CNN's heads (fullgraph=True, the positives' count dynamic), a Graph
# Transformer (bincount's mean over dynamic node counts), IMPALA's LSTM over the rollout and
# neural spline flows (boolean-masked tails inside the graph; not SIREN: its forward makes
# coords.requires_grad_(True) and returns them, where torch.compile's graph breaks too),
# Reptile's MLP under .data updates and load_state_dict
COMPILED = ["prog_gpt.py", "prog_tcn.py", "prog_mobilenet.py", "prog_pinn.py", "prog_dgcnn.py",
            "prog_vqvae.py", "prog_wavenet.py", "prog_clip.py", "prog_mamba.py", "prog_pixelcnn.py",
            "prog_mixup.py", "prog_kvcache.py", "prog_sngan.py", "prog_caption.py",
            "prog_llamagen.py", "prog_stn.py", "prog_gp.py", "prog_attnseq.py", "prog_mpnn.py",
            "prog_moco.py", "prog_sac.py", "prog_capsnet.py", "prog_lora.py", "prog_qat.py", "prog_sae.py",
            "prog_protonet.py", "prog_dit.py", "prog_prune.py", "prog_glow.py", "prog_jem.py",
            "prog_gumbel.py", "prog_t2t.py", "prog_rwkv.py", "prog_settf.py", "prog_tft.py",
            "prog_kws.py", "prog_textcnn.py", "prog_param.py", "prog_hyper.py", "prog_mhalm.py",
            "prog_node.py", "prog_byol.py", "prog_bbb.py", "prog_td3.py", "prog_sage.py",
            "prog_t5enc.py", "prog_ntm.py", "prog_sbert.py", "prog_alibi.py",
            "prog_convnext.py", "prog_mixer.py", "prog_stylegan.py", "prog_cyclegan.py",
            "prog_conformer.py", "prog_perceiver.py",
            "prog_densenet.py", "prog_shufflenet.py", "prog_deeplab.py", "prog_raft.py",
            "prog_hifigan.py", "prog_segformer.py",
            "prog_dlrm.py", "prog_rainbow.py", "prog_hnn.py", "prog_txl.py", "prog_tabnet.py",
            "prog_gatswa.py", "prog_yolo.py", "prog_r2plus1d.py", "prog_convlstm.py",
            "prog_hrnet.py",
            "prog_bertmlm.py", "prog_kge.py", "prog_schnet.py", "prog_dtrans.py", "prog_informer.py",
            "prog_timmutil.py", "prog_fno.py",
            "prog_dino.py", "prog_swav.py", "prog_pointnet.py", "prog_hashsdf.py", "prog_dnc.py",
            "prog_egnn.py", "prog_xlstm.py",
            "prog_convtasnet.py", "prog_ddsp.py", "prog_rnnt.py", "prog_sasrec.py",
            "prog_dcnfm.py", "prog_w2v_a2c.py",
            "prog_specdec.py", "prog_beam.py", "prog_rflow.py", "prog_patchtst.py", "prog_kan.py",
            "prog_retnet.py",
            "prog_nca.py", "prog_snn.py", "prog_deq.py", "prog_rssm.py", "prog_dcnv2.py", "prog_tsp.py",
            "prog_detr.py", "prog_maskrcnn.py", "prog_graphtf.py", "prog_impala.py", "prog_nsf.py",
            "prog_reptile.py"]
# captures a compiled program may take, summed over what it compiled (default: one per
# compiled module and grad mode); none may break its graph
MAX_COMPILES = {"prog_mamba.py": 4,   # the generation's three prefix lengths: range(l) in the scan
                # training, a prefill (its batch dynamic: training's was another), two decode
                # steps (the cache's length dynamic at the second), the batch of 3's decode
                "prog_kvcache.py": 5,
                # G without grad, with grad, in eval; D on data, on G's output, in eval
                "prog_sngan.py": 6,
                "prog_llamagen.py": 4,   # training, prefill, two decode steps (as kvcache's)
                "prog_attnseq.py": 4,   # encoder and decoder, training and greedy decoding
                "prog_moco.py": 3,      # the queue pointer's three values
                # the actor with and without grad and deterministic; the Qs with grad and with
                # their weights frozen for the policy loss; the targets (one class: shared)
                "prog_sac.py": 6,
                "prog_qat.py": 3,   # the observers' first call, the later ones, eval
                "prog_glow.py": 3,  # ActNorm's first call, the later ones, no grad
                "prog_jem.py": 3,   # the energy on SGLD's inputs (eval) and in training; classify
                # dense, then each pruning round's new hooks, then the hooks removed
                "prog_prune.py": 4,
                "prog_settf.py": 3,   # the set size goes dynamic at the second; no grad
                # training, then each prefix length of the greedy generation: range(T) in the
                # WKV loop fixes T (as torch.compile does)
                "prog_rwkv.py": 8,
                "prog_hyper.py": 3,     # the primary net training and in eval; the task net
                "prog_mhalm.py": 2,     # training, then generation (its length dynamic)
                # y0 without grad, then with; `self.nfe` a constant, then a runtime input; eval
                "prog_node.py": 4,
                "prog_bbb.py": 3,       # training; sampled and mean networks in eval
                # the actor on one state, then on batches (dynamic); critic; two targets
                "prog_td3.py": 5,
                # a first batch 12 x 12 (one symbol for both dims, as torch's duck sizing),
                # then 12 x 11; the evaluation without grad
                "prog_sbert.py": 3,
                "prog_alibi.py": 3,   # the first chunk length, then dynamic; no grad
                "prog_mixer.py": 4,     # two mixers, each training and in eval
                # G frozen (D's step), trained, without grad; D trained, on inputs
                # requiring grad (R1), frozen (G's step)
                "prog_stylegan.py": 6,
                # G on data, on the other G's output (requiring grad), without grad; D frozen
                # and trained (each class's captures shared by its two instances)
                "prog_cyclegan.py": 5,
                "prog_perceiver.py": 3,   # training with a mask; eval's embeddings, logits
                # the generator training, then without its weight norm (hooks removed) in
                # eval; the discriminators on a detached and on a grad-requiring fake
                "prog_hifigan.py": 4,
                # two DLRMs: the first static, then its id lists' lengths going dynamic,
                # then without grad; the second dynamic from its first call (as the first
                # learned), then without grad
                "prog_dlrm.py": 5,
                # online: acting without grad, learning (log, batch dynamic), the next
                # states without grad, eval; target without grad
                "prog_rainbow.py": 5,
                # the energy: the batch, one state (RK4 steps), the trajectory without grad;
                # the DEQ layer without grad, with grad, at z0 requiring grad (its convs and
                # GroupNorms never read their training flags: eval reuses them)
                "prog_hnn.py": 6,
                # memories empty (1-D), then full, then the last, shorter segment (its size
                # read by the mask's any().item(): static); each again in eval
                "prog_txl.py": 6,
                "prog_tabnet.py": 3,   # batches of 64, the last one of 32 (ghost chunks); eval
                # training; eval making Detect's grids (stored into its list), then reusing them
                "prog_yolo.py": 3,
                # each teacher-forcing pattern (a list of bools, constants as torch.compile's),
                # four in training, and generation without targets
                "prog_convlstm.py": 5,
                # RotatE and ComplEx, each on positives, head- and tail-batch negatives
                "prog_kge.py": 6,
                # SwAV; Sinkhorn on the batch, then on the queue and batch; Barlow Twins
                "prog_swav.py": 4,
                # the rollout's first step (inputs without grad), the later ones; eval
                "prog_egnn.py": 3,
                # training, the parallel form in eval; the recurrent step
                "prog_xlstm.py": 3,
                "prog_convtasnet.py": 3,   # the separator training and in eval; the PIT loss
                "prog_rnnt.py": 3,   # the transducer training and in eval; the lattice loop
                # SASRec's numpy id arrays are graph inputs, its `ids != 0` and `poss *= ...`
                # traced: one capture, as torch.compile's one graph
                "prog_sasrec.py": 1,
                # three CTR models, each static (the second DCNv2 dynamic from its first call),
                # then its bags' lengths dynamic (a coincidence of two lengths at capture
                # guarded: a fourth once), then in eval
                "prog_dcnfm.py": 9,
                "prog_w2v_a2c.py": 3,   # skip-gram; the actor-critic with and without grad
                # each model training and prefilling; the target verifying gamma + 1 tokens
                # (the cache's length static, then dynamic) and stepping greedily; the draft
                # stepping (static, then dynamic)
                "prog_specdec.py": 9,
                # encoder and decoder training (the context requiring grad from the second
                # step) and in eval; the decoder on batch * beam rows, then on the batch
                "prog_beam.py": 6,
                # training and the parallel form in eval; the recurrent step on an empty
                # incremental_state, at step 1, then with its step count a runtime input
                "prog_retnet.py": 5,
                # the DEQ cell: the solves without grad and the step with grad, in training and
                # in eval; the solves under no_grad (the injection not requiring grad)
                "prog_deq.py": 5,
                "prog_nsf.py": 3}   # log_prob training and without grad; the compiled sampler
# N-BEATS (its per-block forecasts set on the module as a list), DIN's Dice attention,
# BART-style denoising (padding masks, lengths dynamic), CPC (targets written into
# torch.empty, the sampled time t an int argument), a masked diffusion LM and a
# Mixture-of-Depths GPT (topk(sorted=False), sort, gather, scatter_add)
COMPILED += ["prog_nbeats.py", "prog_din.py", "prog_bart.py", "prog_cpc.py", "prog_mdlm.py", "prog_mod.py"]
MAX_COMPILES.update({
    # training, then eval (BatchNorm's running statistics)
    "prog_din.py": 2,
    # training at the first t, then t symbolic (the GRU over t + 1 frames), t = 0; eval
    "prog_cpc.py": 4})
# a Performer LM (FAVOR+ features, cumsum linear attention, an unfold local head) generating
# greedily, Autoformer's FFT auto-correlation (fullgraph=True), an FT-Transformer on
# bucketized quantile bins (fullgraph=True, dynamic=True), ECAPA-TDNN under the AAM softmax
# (fullgraph=True) and WaveRNN's upsampler and GRUs (dynamic=True)
COMPILED += ["prog_performer.py", "prog_autoformer.py", "prog_fttrans.py", "prog_ecapa.py", "prog_wavernn.py"]
MAX_COMPILES.update({
    # training; generation under inference_mode at each of its 4 lengths (torch.compile's
    # 5 graphs too: the chunk(8) loop's chunk count and sizes follow the length)
    "prog_performer.py": 5,
    # the encoder training and in eval; the AAM softmax
    "prog_ecapa.py": 3})
# PointNet++ (farthest point sampling's loop, ball query by sort, fullgraph=True), Slot
# Attention (a GRUCell loop over iterations), VICReg (the loss inside the forward, off-diagonal
# by flatten/view), DiffPool (padded node counts dynamic) and ProdLDA (legacy Variable and
# .new().resize_as_(), where torch.compile breaks into 14 graphs)
COMPILED += ["prog_pointnet2.py", "prog_slotattn.py", "prog_vicreg.py", "prog_diffpool.py", "prog_prodlda.py"]
# DeepAR (a NegativeBinomial likelihood, an LSTM stepped with its state for the forecast)
# and a Hyena LM (implicit long-convolution filters applied by rfft/irfft at n = 2L, greedy
# generation at growing lengths: one dynamic capture, as torch.compile's)
COMPILED += ["prog_deepar.py", "prog_hyena.py"]
MAX_COMPILES.update({"prog_deepar.py": 3})   # training; the context pass; the forecast steps
# LightGCN (torch.sparse.mm propagation over a sparse_coo_tensor, BPR; torch.compile breaks
# its graph at the sparse tensor), GRU4Rec (session-parallel lanes reset by masked_fill) and
# FastSpeech (a length regulator by repeat_interleave and pad_sequence between an encoder,
# a duration predictor and a dynamic=True decoder; not TimesNet: its period detection reads
# topk's indices by .numpy() inside the forward, a graph break here)
COMPILED += ["prog_lightgcn.py", "prog_gru4rec.py", "prog_fastspeech.py"]
# encoder and predictor training and in inference; the decoder's mel length at its first
# call equals the model width (one symbol for both): static, then each new length captures
# (torch.compile's 8 graphs too)
MAX_COMPILES.update({"prog_fastspeech.py": 8})


# CenterNet (gathers at flat centre indices, a max_pool2d NMS and topk decoder compiled
# fullgraph=True), PSPNet (adaptive pooling bins over 7x7, fullgraph=True, a second scale),
# an attentive neural process (Independent Normals and their KL, context sizes dynamic),
# MuZero (compiled bound methods, a hook on the hidden state its value head also reads) and
# DimeNet (a radius graph and its triplets by nonzero and repeat_interleave inside the graph,
# molecule sizes dynamic)
COMPILED += ["prog_centernet.py", "prog_pspnet.py", "prog_anp.py", "prog_muzero.py", "prog_dimenet.py"]
MAX_COMPILES.update({
    "prog_centernet.py": 3,   # the model training and without grad; the decoder
    "prog_pspnet.py": 3,      # training; eval at 25x25, then at 33x33
    "prog_muzero.py": 4})     # both inferences training and without grad

# a Longformer (banded attention by unfold, global queries written back by torch.where;
# batch lengths padded to the window), a Switch Transformer LM (capacity-limited top-1
# routing, scatter_add_ dispatch, aux losses set on the layers), N-HiTS (multi-rate
# max-pooling, interpolated forecast knots, dynamic=True) and BERT4Rec (a cloze task over
# left-padded histories, candidates gathered for HR/NDCG)
COMPILED += ["prog_longformer.py", "prog_switch.py", "prog_nhits.py", "prog_bert4rec.py"]
# training at the first length, then dynamic; eval (torch.compile's 3 graphs too)
MAX_COMPILES.update({"prog_longformer.py": 3})
# a Whisper-style recognizer (log-mel by stft, greedy decoding under inference_mode from a
# key/value cache that forward hooks keep in the dict the decoder is passed)
COMPILED += ["prog_whisper.py"]
# the encoder training and in eval; the decoder training, at its first step (an empty
# cache), its second (one token cached), then the cache's length dynamic (torch.compile's 6)
MAX_COMPILES.update({"prog_whisper.py": 6})
# a CTC keyword-sequence model (MFCCs by a DCT matrix, masked CMVN, depthwise-separable
# Conv1d, a BiGRU; dynamic=True over batch and lengths; unique_consecutive decoding)
COMPILED += ["prog_ctckws.py"]


def _run(framework, mode, weights, programs):
    out = os.path.join(weights, f"{framework}-{mode}.json")
    # PyTorch on one thread: beside the suite's other workers, its thread pool waits on
    # cores they hold (the reference runs 2-3x slower on two threads)
    env = dict(os.environ, OMP_NUM_THREADS="1") if framework == "torch" else None
    subprocess.run([sys.executable, os.path.join(HERE, "_runner.py"), framework, mode, weights, out]
                   + programs, check=True, cwd=HERE, env=env, timeout=900)
    with open(out) as f:
        return json.load(f)


# The programs run in PARTS parts, each from a test file of its own (this one and
# test_ported_programs_part*.py, each naming its PART) so that the suite's runner spreads
# them over its workers, each part's eager and compiled runs checked against one PyTorch run.
PARTS = 4
PART = 0
pytestmark = pytest.mark.long   # tests/conftest.py: started first


@pytest.fixture(scope="module")
def reference(request, tmp_path_factory):
    """PyTorch's losses of the module's part of the programs, and the weights it drew."""
    assert set(COMPILED) <= set(PROGRAMS), set(COMPILED) - set(PROGRAMS)
    programs = PROGRAMS[request.module.PART::PARTS]
    weights = str(tmp_path_factory.mktemp("program_weights"))
    return weights, _run("torch", "eager", weights, programs)


def _compare(got, want):
    for prog in want:
        assert not isinstance(want[prog], str), f"{prog} fails under PyTorch: {want[prog]}"
        assert not isinstance(got[prog], str), f"{prog}: {got[prog]}"
        np.testing.assert_allclose(got[prog], want[prog], rtol=1e-4, atol=1e-6, err_msg=prog)


def check_eager(reference):
    """The eager runs of the reference's programs give PyTorch's losses."""
    weights, want = reference
    _compare(_run("tracejit", "eager", weights, list(want)), want)


def check_compiled(reference):
    """The compiled runs of the reference's programs in COMPILED give PyTorch's losses in
    bounded captures."""
    weights, want = reference
    programs = [p for p in COMPILED if p in want]
    got = _run("tracejit", "compiled", weights, programs)
    _compare(got, {p: want[p] for p in programs})
    assert sorted(got["__compiles__"]) == sorted(programs)
    for prog, counts in got["__compiles__"].items():
        assert 1 <= counts["compiles"] <= MAX_COMPILES.get(prog, 2), (prog, counts)
        assert counts["eager_fallbacks"] == 0, (prog, counts)


def test_programs_give_pytorchs_losses_eager(reference):
    check_eager(reference)


def test_compiled_programs_give_pytorchs_losses_in_bounded_compiles(reference):
    check_compiled(reference)


# ESRGAN (RRDB dense blocks, PixelShuffle, a relativistic average GAN loss, a frozen
# feature extractor) and FCOS (GroupNorm towers, per-level Scale, sigmoid focal loss
# compiled fullgraph=True, a GIoU loss over boolean-masked intersections, dynamic=True)
COMPILED += ["prog_esrgan.py", "prog_fcos.py"]
MAX_COMPILES.update({
    # G training and without grad; the SRResNet tail likewise; D frozen on data and on G's
    # output, trained on data and on the detached output; the extractor on G's output, on
    # data (torch.compile's 10 graphs too)
    "prog_esrgan.py": 10,
    # the model training and without grad; the focal loss; GIoU (torch.compile: 8 graphs,
    # breaking at the masked intersection's nonzero)
    "prog_fcos.py": 4})
# GATv2 with edge features (a softmax over each node's incoming edges by scatter_reduce amax,
# self-loop features by index_reduce_ mean, a virtual node, attention pooling over
# num_graphs: dynamic=True, graph counts symbolic)
COMPILED += ["prog_gatv2.py"]
# Point Transformer (kNN by topk on cdist, gathered neighbours, vector attention, farthest
# point sampling's loop in the graph, fullgraph=True)
COMPILED += ["prog_ptrans.py"]
# MobileViT-v2 (patches by F.unfold and back by F.fold, separable self-attention, GroupNorm(1)
# on 4-D maps, an odd eval size resized by interpolate, channels_last inputs)
COMPILED += ["prog_mobilevit.py"]
# ConvNeXt-V2's FCMAE (GRN by torch.norm over H and W, masks by argsort of noise and
# repeat_interleave, a mask token, per-patch normalized targets by an einsum patchify)
COMPILED += ["prog_convnextv2.py"]
# the FCMAE training and in eval; its encoder compiled on its own in eval
MAX_COMPILES.update({"prog_convnextv2.py": 3})
# Cluster-GCN (block adjacencies of cluster unions by index_select, diagonal enhancement,
# concatenated normalized skips; cluster sizes dynamic=True)
COMPILED += ["prog_clustergcn.py"]
# all fullgraph=True: ENet (MaxPool2d indices unpooled by MaxUnpool2d at given output sizes,
# PReLU, asymmetric and dilated bottlenecks, a Lovasz-softmax loss by sort and cumsum), PaiNN
# (vector features, forces by create_graph, molecule counts symbolic under dynamic=True),
# FFJORD (a Hutchinson divergence through the compiled vector field, RK4 in Python; one
# dynamic=True capture for training and sampling), IQN (cosine quantile embeddings, the
# pairwise quantile Huber loss, a vectorized CartPole) and a SimSiam-pretrained PatchCore
# (forward hooks into a dict, a k-center coreset, cdist + topk(largest=False))
COMPILED += ["prog_enet.py", "prog_painn.py", "prog_cnf.py", "prog_iqn.py", "prog_patchcore.py"]
MAX_COMPILES.update({
    "prog_painn.py": 2,   # training; the rotated molecules without grad
    # local: acting (batch and quantile count alike: one symbol), the next states without
    # grad, learning; the target network
    "prog_iqn.py": 4,
    # SimSiam training; the extractor without grad; the k-NN's 1 neighbour (specialized, as
    # torch.compile's), then 3
    "prog_patchcore.py": 4})
# a Reformer LM (LSH buckets by argmax of rotations, argsort chunks, look-one-back, the sort
# undone by gather, reversible blocks), DeBERTa's disentangled attention (log-bucketed
# relative positions gathered c2p and p2c; lengths dynamic), a TabTransformer (offset
# column ids, NaN-imputed continuous columns; fullgraph=True, dynamic=True), a NoPE LM
# sampling through transformers-style logits processors (repetition penalty by scatter,
# top-k, top-p by sort/cumsum/scatter; fullgraph=True), a SpecAugment audio CNN (masks
# written in place in the Dataset, masked mean pooling; dynamic=True) and a TCN forecaster
# under parametrizations.weight_norm (quantile loss; parametrize.cached, then removed)
COMPILED += ["prog_reformer.py", "prog_deberta.py", "prog_tabtrans.py", "prog_topp.py", "prog_specaug.py",
             "prog_tcnfc.py"]
MAX_COMPILES.update({
    # the LM training and generating (dynamic); the processors at the first length, then
    # dynamic while EOS is suppressed, then after min_length (torch.compile's 6 graphs too)
    "prog_topp.py": 6,
    # training; eval under parametrize.cached(); the plain convs after the weight norm's
    # removal (torch.compile's 3 graphs too)
    "prog_tcnfc.py": 3})
# a T5 encoder-decoder decoding greedily from a cache under inference_mode (unidirectional
# position buckets cut to the last query rows, cross-attention keys kept in the cache tuple)
COMPILED += ["prog_t5dec.py"]
# the encoder training and on the smaller eval batch; the decoder training (dynamic), on the
# start token, on the first cache, with the cache's length dynamic, the uncached prefix
MAX_COMPILES.update({"prog_t5dec.py": 7})
# SAM (a SAM optimizer wrapping SGD, two passes a step, BatchNorm's momentum toggled by
# model.apply; fullgraph=True), TRADES and fast-FGSM adversarial training (input gradients
# by autograd.grad in eval mode, Variable leaves; dynamic=True), FixMatch (interleaved
# labeled and unlabeled batches, thresholded pseudo-labels, an EMA model; fullgraph=True)
# and a Lagrangian neural network (torch.func's hessian and nested jacrev vmapped, pinv;
# an RK4 rollout under no_grad)
COMPILED += ["prog_sam.py", "prog_trades.py", "prog_fixmatch.py", "prog_lnn.py"]
MAX_COMPILES.update({
    # training, then BatchNorm's momentum zeroed for the second pass; eval (torch.compile's 3)
    "prog_sam.py": 3,
    # in eval on inputs requiring grad and not, in training likewise; eval without grad
    # (torch.compile's 8)
    "prog_trades.py": 5})
# Demucs (Conv1d + GLU encoders, a BiLSTM bottleneck, ConvTranspose1d decoders on
# center-trimmed skips, Remix by argsort and gather), SuperGlue (log-domain Sinkhorn over
# dustbins joined by cat, mutual matching by gather; dynamic=True, fullgraph=True), a
# Child-Sum Tree-LSTM (its node cell compiled dynamic=True, called by a recursion over Python
# trees) and EfficientDet's BiFPN (same padding from the input size, fast normalized fusion,
# a Swish autograd.Function, heads shared over five levels)
COMPILED += ["prog_demucs.py", "prog_superglue.py", "prog_treelstm.py", "prog_bifpn.py"]
MAX_COMPILES.update({
    # the cell's child count read by len() for repeat: one capture per count (1, 2, 3),
    # training and without grad, and a leaf's zero state requiring grad under no_grad
    # (torch.compile's 7 graphs too)
    "prog_treelstm.py": 7})
# 2-D Gaussian splatting (a renderer sorting by depth and compositing by an exclusive
# cumprod, compiled dynamic=True across densification's clone and prune, which rebuild the
# Adam state of named param groups)
COMPILED += ["prog_splat.py"]
