from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from torch.autograd import Variable
torch.manual_seed(0)
# PointNet classification as pointnet.pytorch writes it: an input T-Net predicting a 3x3
# transform and a feature T-Net a 64x64 one (the identity added by Variable(torch.from_numpy(
# ...)).view(1, k*k).repeat(batchsize, 1)), both applied by bmm between transposes, shared
# MLPs as kernel-1 Conv1d + BatchNorm1d, a symmetric max over points (torch.max(x, 2,
# keepdim=True)[0]), the feature-transform regularizer ||I - A A^T|| (torch.eye(d)[None]),
# NLL on log_softmax, StepLR, a Dataset that rotates, jitters, centres and scales each cloud,
# accuracy by pred.data.max(1)[1].eq(target.data).cpu().sum(), then eval under no_grad
class STN3d(nn.Module):
    def __init__(self, width=32):
        super(STN3d, self).__init__()
        self.conv1 = torch.nn.Conv1d(3, 16, 1)
        self.conv2 = torch.nn.Conv1d(16, 32, 1)
        self.conv3 = torch.nn.Conv1d(32, width, 1)
        self.fc1 = nn.Linear(width, 24)
        self.fc2 = nn.Linear(24, 16)
        self.fc3 = nn.Linear(16, 9)
        self.relu = nn.ReLU()
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(16), nn.BatchNorm1d(32), nn.BatchNorm1d(width)
        self.bn4, self.bn5 = nn.BatchNorm1d(24), nn.BatchNorm1d(16)
        self.width = width
    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.width)
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)
        iden = Variable(torch.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]).astype(np.float32))).view(1, 9).repeat(
            batchsize, 1)
        if x.is_cuda:
            iden = iden.cuda()
        x = x + iden
        x = x.view(-1, 3, 3)
        return x
class STNkd(nn.Module):
    def __init__(self, k=64, width=32):
        super(STNkd, self).__init__()
        self.conv1 = torch.nn.Conv1d(k, 32, 1)
        self.conv2 = torch.nn.Conv1d(32, 32, 1)
        self.conv3 = torch.nn.Conv1d(32, width, 1)
        self.fc1 = nn.Linear(width, 24)
        self.fc2 = nn.Linear(24, 16)
        self.fc3 = nn.Linear(16, k * k)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(32), nn.BatchNorm1d(32), nn.BatchNorm1d(width)
        self.bn4, self.bn5 = nn.BatchNorm1d(24), nn.BatchNorm1d(16)
        self.k, self.width = k, width
    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.width)
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)
        iden = Variable(torch.from_numpy(np.eye(self.k).flatten().astype(np.float32))).view(1, self.k * self.k).repeat(
            batchsize, 1)
        if x.is_cuda:
            iden = iden.cuda()
        x = x + iden
        x = x.view(-1, self.k, self.k)
        return x
class PointNetfeat(nn.Module):
    def __init__(self, global_feat=True, feature_transform=False, width=48):
        super(PointNetfeat, self).__init__()
        self.stn = STN3d()
        self.conv1 = torch.nn.Conv1d(3, 16, 1)
        self.conv2 = torch.nn.Conv1d(16, 32, 1)
        self.conv3 = torch.nn.Conv1d(32, width, 1)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(16), nn.BatchNorm1d(32), nn.BatchNorm1d(width)
        self.global_feat = global_feat
        self.feature_transform = feature_transform
        self.width = width
        if self.feature_transform:
            self.fstn = STNkd(k=16)
    def forward(self, x):
        n_pts = x.size()[2]
        trans = self.stn(x)
        x = x.transpose(2, 1)
        x = torch.bmm(x, trans)
        x = x.transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        if self.feature_transform:
            trans_feat = self.fstn(x)
            x = x.transpose(2, 1)
            x = torch.bmm(x, trans_feat)
            x = x.transpose(2, 1)
        else:
            trans_feat = None
        pointfeat = x
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.width)
        if self.global_feat:
            return x, trans, trans_feat
        else:
            x = x.view(-1, self.width, 1).repeat(1, 1, n_pts)
            return torch.cat([x, pointfeat], 1), trans, trans_feat
class PointNetCls(nn.Module):
    def __init__(self, k=2, feature_transform=False):
        super(PointNetCls, self).__init__()
        self.feature_transform = feature_transform
        self.feat = PointNetfeat(global_feat=True, feature_transform=feature_transform)
        self.fc1 = nn.Linear(48, 32)
        self.fc2 = nn.Linear(32, 24)
        self.fc3 = nn.Linear(24, k)
        self.dropout = nn.Dropout(p=0.0)   # (0.3 in the repository: the frameworks draw other masks)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(24)
        self.relu = nn.ReLU()
    def forward(self, x):
        x, trans, trans_feat = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        x = self.fc3(x)
        return F.log_softmax(x, dim=1), trans, trans_feat
def feature_transform_regularizer(trans):
    d = trans.size()[1]
    batchsize = trans.size()[0]
    I = torch.eye(d)[None, :, :]
    if trans.is_cuda:
        I = I.cuda()
    loss = torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - I, dim=(1, 2)))
    return loss
class ShapeDataset(data.Dataset):   # spheres (class 0) and cube surfaces (class 1)
    def __init__(self, n, npoints=64, seed=0, data_augmentation=True):
        rs = np.random.RandomState(seed)
        self.clouds, self.labels = [], []
        for i in range(n):
            p = rs.standard_normal((npoints, 3))
            if i % 2:
                p = p / np.abs(p).max(1, keepdims=True) * rs.uniform(0.5, 1.5, size=(1, 3))
            else:
                p = p / np.linalg.norm(p, axis=1, keepdims=True)
            self.clouds.append(p.astype(np.float32)); self.labels.append(i % 2)
        self.rs, self.data_augmentation = rs, data_augmentation
    def __getitem__(self, index):
        point_set = self.clouds[index].copy()
        point_set = point_set - np.expand_dims(np.mean(point_set, axis=0), 0)  # center
        dist = np.max(np.sqrt(np.sum(point_set ** 2, axis=1)), 0)
        point_set = point_set / dist  # scale
        if self.data_augmentation:
            theta = self.rs.uniform(0, np.pi * 2)
            rotation_matrix = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
            point_set[:, [0, 2]] = point_set[:, [0, 2]].dot(rotation_matrix)  # random rotation
            point_set += self.rs.normal(0, 0.02, size=point_set.shape)  # random jitter
        point_set = torch.from_numpy(point_set.astype(np.float32))
        cls = torch.from_numpy(np.array([self.labels[index]]).astype(np.int64))
        return point_set, cls
    def __len__(self):
        return len(self.clouds)
dataset = ShapeDataset(24)
test_dataset = ShapeDataset(10, seed=1, data_augmentation=False)
dataloader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=False)
testdataloader = torch.utils.data.DataLoader(test_dataset, batch_size=5, shuffle=False)
classifier = PointNetCls(k=2, feature_transform=True); sync(classifier)
net = comp(classifier)
optimizer = optim.Adam(classifier.parameters(), lr=0.001, betas=(0.9, 0.999))
scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
LOSSES = []
for epoch in range(2):
    for i, data_ in enumerate(dataloader, 0):
        points, target = data_
        target = target[:, 0]
        points = points.transpose(2, 1)
        optimizer.zero_grad()
        classifier = classifier.train()
        pred, trans, trans_feat = net(points)
        loss = F.nll_loss(pred, target)
        loss += feature_transform_regularizer(trans_feat) * 0.001
        loss.backward()
        optimizer.step()
        pred_choice = pred.data.max(1)[1]
        correct = pred_choice.eq(target.data).cpu().sum()
        LOSSES += [loss.item(), correct.item() / float(8)]
    scheduler.step()
total_correct, total_testset = 0, 0
classifier = classifier.eval()
with torch.no_grad():
    for i, data_ in enumerate(testdataloader, 0):
        points, target = data_
        target = target[:, 0]
        points = points.transpose(2, 1)
        pred, trans, _ = net(points)
        pred_choice = pred.data.max(1)[1]
        total_correct += pred_choice.eq(target.data).cpu().sum().item()
        total_testset += points.size()[0]
        LOSSES.append(float(pred.shape[0]))
# (the eval outputs and running means are left out: the biases of the Conv1d/Linear layers
# before BatchNorm get gradients of rounding size, which Adam turns into lr-sized steps)
LOSSES += [total_correct / float(total_testset), classifier.feat.fstn.bn3.running_var.sum().item()]
