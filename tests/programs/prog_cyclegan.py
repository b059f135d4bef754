from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import functools, itertools, random, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# pix2pix / CycleGAN pieces as junyanz/pytorch-CycleGAN-and-pix2pix writes them, scaled
# down: a ResNet generator (ReflectionPad2d, InstanceNorm2d without affine, stride-2 convs
# and ConvTranspose2d with output_padding, residual blocks, Tanh), the 70x70-style
# PatchGAN discriminator (LeakyReLU 0.2, InstanceNorm2d, a 1-channel map of logits), the
# GANLoss class with LSGAN's MSE against targets expanded from registered buffers, the
# cycle's L1 terms and identity loss, two Adams (itertools.chain of both generators, and
# both discriminators), LambdaLR's linear decay, set_requires_grad on the discriminators,
# and an ImagePool of past fakes (a Python random coin per image: seeded the same in both
# frameworks)
class ResnetBlock(nn.Module):
    def __init__(self, dim, norm_layer, use_dropout, use_bias):
        super(ResnetBlock, self).__init__()
        conv_block = [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=use_bias),
                      norm_layer(dim), nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]
        conv_block += [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=use_bias),
                       norm_layer(dim)]
        self.conv_block = nn.Sequential(*conv_block)
    def forward(self, x):
        return x + self.conv_block(x)
class ResnetGenerator(nn.Module):
    def __init__(self, input_nc, output_nc, ngf=8, norm_layer=nn.BatchNorm2d, use_dropout=False, n_blocks=2):
        super(ResnetGenerator, self).__init__()
        if type(norm_layer) == functools.partial:
            use_bias = norm_layer.func == nn.InstanceNorm2d
        else:
            use_bias = norm_layer == nn.InstanceNorm2d
        model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf), nn.ReLU(True)]
        n_downsampling = 2
        for i in range(n_downsampling):
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1, bias=use_bias),
                      norm_layer(ngf * mult * 2), nn.ReLU(True)]
        mult = 2 ** n_downsampling
        for i in range(n_blocks):
            model += [ResnetBlock(ngf * mult, norm_layer=norm_layer, use_dropout=use_dropout, use_bias=use_bias)]
        for i in range(n_downsampling):
            mult = 2 ** (n_downsampling - i)
            model += [nn.ConvTranspose2d(ngf * mult, int(ngf * mult / 2), kernel_size=3, stride=2, padding=1,
                                         output_padding=1, bias=use_bias),
                      norm_layer(int(ngf * mult / 2)), nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3), nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0), nn.Tanh()]
        self.model = nn.Sequential(*model)
    def forward(self, input):
        return self.model(input)
class NLayerDiscriminator(nn.Module):
    def __init__(self, input_nc, ndf=8, n_layers=3, norm_layer=nn.BatchNorm2d):
        super(NLayerDiscriminator, self).__init__()
        if type(norm_layer) == functools.partial:
            use_bias = norm_layer.func == nn.InstanceNorm2d
        else:
            use_bias = norm_layer == nn.InstanceNorm2d
        kw, padw = 4, 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        for n in range(1, n_layers):
            nf_mult_prev, nf_mult = nf_mult, min(2 ** n, 8)
            sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=use_bias),
                         norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        nf_mult_prev, nf_mult = nf_mult, min(2 ** n_layers, 8)
        sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
                     norm_layer(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]
        self.model = nn.Sequential(*sequence)
    def forward(self, input):
        return self.model(input)
class GANLoss(nn.Module):
    def __init__(self, gan_mode, target_real_label=1.0, target_fake_label=0.0):
        super(GANLoss, self).__init__()
        self.register_buffer('real_label', torch.tensor(target_real_label))
        self.register_buffer('fake_label', torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        if gan_mode == 'lsgan':
            self.loss = nn.MSELoss()
        elif gan_mode == 'vanilla':
            self.loss = nn.BCEWithLogitsLoss()
        else:
            raise NotImplementedError('gan mode %s not implemented' % gan_mode)
    def get_target_tensor(self, prediction, target_is_real):
        target_tensor = self.real_label if target_is_real else self.fake_label
        return target_tensor.expand_as(prediction)
    def __call__(self, prediction, target_is_real):
        target_tensor = self.get_target_tensor(prediction, target_is_real)
        return self.loss(prediction, target_tensor)
class ImagePool():
    def __init__(self, pool_size):
        self.pool_size = pool_size
        if self.pool_size > 0:
            self.num_imgs = 0
            self.images = []
    def query(self, images):
        if self.pool_size == 0:
            return images
        return_images = []
        for image in images:
            image = torch.unsqueeze(image.data, 0)
            if self.num_imgs < self.pool_size:
                self.num_imgs = self.num_imgs + 1
                self.images.append(image)
                return_images.append(image)
            else:
                p = random.uniform(0, 1)
                if p > 0.5:
                    random_id = random.randint(0, self.pool_size - 1)
                    tmp = self.images[random_id].clone()
                    self.images[random_id] = image
                    return_images.append(tmp)
                else:
                    return_images.append(image)
        return torch.cat(return_images, 0)
def set_requires_grad(nets, requires_grad=False):
    if not isinstance(nets, list):
        nets = [nets]
    for net in nets:
        if net is not None:
            for param in net.parameters():
                param.requires_grad = requires_grad
norm_layer = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)
netG_A, netG_B = ResnetGenerator(3, 3, norm_layer=norm_layer), ResnetGenerator(3, 3, norm_layer=norm_layer)
netD_A, netD_B = NLayerDiscriminator(3, norm_layer=norm_layer), NLayerDiscriminator(3, norm_layer=norm_layer)
sync(netG_A, netG_B, netD_A, netD_B)
G_A, G_B, D_A, D_B = comp(netG_A), comp(netG_B), comp(netD_A), comp(netD_B)
criterionGAN, criterionCycle, criterionIdt = GANLoss('lsgan'), torch.nn.L1Loss(), torch.nn.L1Loss()
optimizer_G = torch.optim.Adam(itertools.chain(netG_A.parameters(), netG_B.parameters()), lr=2e-4, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(itertools.chain(netD_A.parameters(), netD_B.parameters()), lr=2e-4, betas=(0.5, 0.999))
def lambda_rule(epoch):
    return 1.0 - max(0, epoch + 1 - 2) / float(3 + 1)
schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda=lambda_rule) for o in (optimizer_G, optimizer_D)]
fake_A_pool, fake_B_pool = ImagePool(3), ImagePool(3)
lambda_A = lambda_B = 10.0
lambda_idt = 0.5
random.seed(0)
r = np.random.default_rng(0)
def backward_D_basic(netD, real, fake):
    pred_real = netD(real)
    loss_D_real = criterionGAN(pred_real, True)
    pred_fake = netD(fake.detach())
    loss_D_fake = criterionGAN(pred_fake, False)
    loss_D = (loss_D_real + loss_D_fake) * 0.5
    loss_D.backward()
    return loss_D
LOSSES = []
for epoch in range(4):
    real_A = torch.from_numpy(np.tanh(r.standard_normal((2, 3, 32, 32))).astype(np.float32))
    real_B = torch.from_numpy(np.tanh(r.standard_normal((2, 3, 32, 32))).astype(np.float32))
    fake_B = G_A(real_A)
    rec_A = G_B(fake_B)
    fake_A = G_B(real_B)
    rec_B = G_A(fake_A)
    set_requires_grad([netD_A, netD_B], False)
    optimizer_G.zero_grad()
    idt_A = G_A(real_B)
    loss_idt_A = criterionIdt(idt_A, real_B) * lambda_B * lambda_idt
    idt_B = G_B(real_A)
    loss_idt_B = criterionIdt(idt_B, real_A) * lambda_A * lambda_idt
    loss_G_A = criterionGAN(D_A(fake_B), True)
    loss_G_B = criterionGAN(D_B(fake_A), True)
    loss_cycle_A = criterionCycle(rec_A, real_A) * lambda_A
    loss_cycle_B = criterionCycle(rec_B, real_B) * lambda_B
    loss_G = loss_G_A + loss_G_B + loss_cycle_A + loss_cycle_B + loss_idt_A + loss_idt_B
    loss_G.backward()
    optimizer_G.step()
    set_requires_grad([netD_A, netD_B], True)
    optimizer_D.zero_grad()
    loss_D_A = backward_D_basic(D_A, real_B, fake_B_pool.query(fake_B))
    loss_D_B = backward_D_basic(D_B, real_A, fake_A_pool.query(fake_A))
    optimizer_D.step()
    for scheduler in schedulers:
        scheduler.step()
    LOSSES += [loss_G.item(), loss_cycle_A.item(), loss_idt_B.item(), loss_D_A.item(), loss_D_B.item(),
               optimizer_G.param_groups[0]['lr'] * 1e4]
# pix2pix's generator loss on the same pieces: GAN on the concatenated pair + L1 * 100
netD_cond = NLayerDiscriminator(6, n_layers=2, norm_layer=norm_layer); sync(netD_cond)
with torch.no_grad():
    fake_B = G_A(real_A)
    pred = netD_cond(torch.cat((real_A, fake_B), 1))
    LOSSES += [criterionGAN(pred, True).item() + F.l1_loss(fake_B, real_B).item() * 100.0,
               len(fake_A_pool.images)]
