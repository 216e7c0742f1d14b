"""The filter engine (decisions.md, Records, Access rules and Field rules): pure, imports nothing
from `cms` but `cms.errors`.

`grammar` turns filter and rule text into an AST; `sort` parses `-created,title`; `conditions`
resolves and types an AST over a collection's fields and binds `@request.*` (`rules`), giving one
`Cond` tree; its two back ends are `mongo` (the only code that builds `$` operators from user
input) and `predicate` (the same decision in memory), with the value semantics of `values`. Every
failure is `cms.errors.InvalidFilter` (400 `invalid_filter`). Only `cms.services.access` uses the
back ends.
"""
