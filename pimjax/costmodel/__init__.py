"""pimjax.costmodel"""
