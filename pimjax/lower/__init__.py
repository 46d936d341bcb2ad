"""pimjax.lower"""
