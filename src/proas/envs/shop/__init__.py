"""The shop environment: WebShop's text mode, reward and goals over WebShop-schema data, offline.

``make_shop_env()`` gives a ``ShopEnv`` over proas's shipped synthetic catalog; pass ``items=``,
``attrs=``, ``human=`` to run over WebShop's own files. See ``docs/shop.md``.
"""

from proas.envs.shop.engine import ShopCatalog
from proas.envs.shop.env import ShopEnv, make_shop_env, parse_action

__all__ = ["ShopCatalog", "ShopEnv", "make_shop_env", "parse_action"]
