"""pimjax.sim"""
