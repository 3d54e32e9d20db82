"""Registered example models; importing this package registers them."""
from model_zoo import census
from model_zoo import digits
from model_zoo import linear_regression
from model_zoo import movielens
from model_zoo import resnet20
from model_zoo import wide_deep
