"""Renderers: each reads an already computed summary and only formats it."""
