"""pimjax.partition"""
